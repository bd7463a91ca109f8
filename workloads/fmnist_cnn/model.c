/*
 * model.c (fmnist_cnn): a small ResNet (He et al., 2016) for 28x28 images,
 * model name "resnet".
 *
 *   stem:   conv3x3(width) - norm - act
 *   stages: `stages` stages of `blocks` basic blocks; stage s has width*2^s
 *           channels, and its first block (s > 0) halves the resolution with
 *           a stride-2 conv and a 1x1 stride-2 projection on the shortcut
 *   block:  conv3x3 - norm - act - conv3x3 - norm, + shortcut, act
 *   head:   global average pool - linear(classes)
 *
 * [model] keys: width, stages, blocks, activation (relu|gelu|silu|tanh),
 * norm (batchnorm|layernorm|none; convs carry a bias only without norm),
 * bn_momentum, init (kaiming_uniform|he_normal|lecun_normal),
 * label_smoothing.
 */
#include "workload/workload.h"

#include <stdio.h>
#include <string.h>

static const char *const resnet_keys[] = {
	"width", "stages", "blocks", "activation", "norm", "bn_momentum",
	"init", "label_smoothing", NULL};

struct cfg {
	int act;
	int norm; /* 0 none, 1 batchnorm, 2 layernorm */
	float momentum;
};

static int conv_norm(apf_net *net, int t, int ch, int k, int s, int p,
		     const struct cfg *c, const char *name)
{
	char n[48];
	snprintf(n, sizeof n, "%s.conv", name);
	t = apf_net_conv2d(net, t, ch, k, s, p, c->norm == 0, n);
	snprintf(n, sizeof n, "%s.norm", name);
	if (t >= 0 && c->norm == 1)
		t = apf_net_batchnorm(net, t, c->momentum, 1e-5f, n);
	if (t >= 0 && c->norm == 2)
		t = apf_net_layernorm(net, t, 1e-5f, n);
	return t;
}

static int basic_block(apf_net *net, int in, int ch, int stride,
		       const struct cfg *c, const char *name)
{
	char n[40];
	snprintf(n, sizeof n, "%s.a", name);
	int t = conv_norm(net, in, ch, 3, stride, 1, c, n);
	if (t >= 0)
		t = apf_net_activation(net, t, c->act);
	snprintf(n, sizeof n, "%s.b", name);
	if (t >= 0)
		t = conv_norm(net, t, ch, 3, 1, 1, c, n);
	int H, W, C;
	apf_net_tensor_shape(net, in, &H, &W, &C);
	int shortcut = in;
	snprintf(n, sizeof n, "%s.proj", name);
	if (t >= 0 && (stride != 1 || C != ch))
		shortcut = conv_norm(net, in, ch, 1, stride, 0, c, n);
	if (t >= 0 && shortcut >= 0)
		t = apf_net_add(net, t, shortcut);
	if (t >= 0 && shortcut < 0)
		t = shortcut;
	if (t >= 0)
		t = apf_net_activation(net, t, c->act);
	return t;
}

static int resnet_build(apf_net **out, apf_backend *be,
			const apf_workload_spec *w, const char *variant, int H,
			int W, int C, int classes)
{
	*out = NULL;
	long width, stages, blocks;
	double momentum;
	const char *act_name, *norm;
	int rc = apf_model_long(&width, w, variant, "width", 16, 1, 1024);
	if (!rc)
		rc = apf_model_long(&stages, w, variant, "stages", 3, 1, 4);
	if (!rc)
		rc = apf_model_long(&blocks, w, variant, "blocks", 1, 1, 8);
	if (!rc)
		rc = apf_model_double(&momentum, w, variant, "bn_momentum", 0.1, 0.0,
				      1.0);
	if (rc)
		return rc;
	apf_model_string(&act_name, w, variant, "activation", "relu");
	apf_model_string(&norm, w, variant, "norm", "batchnorm");
	struct cfg c = {apf_activation_parse(act_name), -1, (float)momentum};
	if (!c.act)
		return apf_error(APF_EINPUT, "[model] activation",
				 "'%s' (relu, gelu, silu, "
				 "tanh)",
				 act_name);
	if (!strcmp(norm, "none"))
		c.norm = 0;
	else if (!strcmp(norm, "batchnorm"))
		c.norm = 1;
	else if (!strcmp(norm, "layernorm"))
		c.norm = 2;
	else
		return apf_error(APF_EINPUT, "[model] norm",
				 "'%s' (batchnorm, layernorm, "
				 "none)",
				 norm);
	apf_net *net;
	rc = apf_net_new(&net, be, H, W, C);
	if (rc)
		return rc;
	int t = conv_norm(net, 0, (int)width, 3, 1, 1, &c, "stem");
	if (t >= 0)
		t = apf_net_activation(net, t, c.act);
	for (int s = 0; t >= 0 && s < stages; s++)
		for (int b = 0; t >= 0 && b < blocks; b++) {
			char name[32];
			snprintf(name, sizeof name, "stage%d.block%d", s + 1,
				 b + 1);
			t = basic_block(net, t, (int)(width << s),
					s > 0 && b == 0 ? 2 : 1, &c, name);
		}
	if (t >= 0)
		t = apf_net_global_avgpool(net, t);
	if (t >= 0)
		t = apf_net_linear(net, t, classes, 1, "head");
	rc = t < 0 ? t : apf_net_finish(net, t);
	if (rc) {
		apf_net_free(net);
		return rc;
	}
	*out = net;
	return 0;
}

const struct apf_model_def apf_model_resnet = {"resnet", resnet_keys,
					       resnet_build};
