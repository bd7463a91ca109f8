/*
 * model.c (fmnist_unet): the U-Net of fastMRI's reference model (Ronneberger
 * et al., 2015; Zbontar et al., 2018) at Fashion-MNIST's size, model name
 * "unet".
 *
 *   input (B,28,28,1) -> block(1 -> C) ---------------------------- concat -> block(2C -> C) -> 1x1 conv -> (B,28,28,1)
 *                      avg pool 2 -> block(C -> 2C) ------- concat -> block(4C -> 2C) -> up(2C -> C)
 *                                   avg pool 2 -> block(2C -> 4C) -> up(4C -> 2C)
 *
 * with depth down-samplings (2 above: 28, 14, 7). A block is
 * conv 3x3 -> norm -> activation, twice; an up step is a transposed
 * convolution (kernel 2, stride 2) -> norm -> activation. Convolutions that
 * a norm follows have no bias. The output is the reconstructed image,
 * compared with the target by the L1 loss and scored by SSIM.
 *
 * [model] keys:
 *   channels    C, the first block's width (doubled at each down-sampling)
 *   depth       down-samplings (the image's sides must divide by 2^depth)
 *   norm        instance | layernorm (over each pixel's channels) | none
 *   activation  relu | tanh | gelu | silu
 *   init        kaiming_uniform | he_normal | lecun_normal
 *
 * Parameter names: down<i>.conv<j>, down<i>.norm<j> (i = 1..depth + 1, the
 * last the bottom), up<i>.conv (transposed) and up<i>.norm, up<i>.block
 * conv<j> / norm<j>, out.
 */
#include "workload/workload.h"

#include <stdio.h>
#include <string.h>

static const char *const unet_keys[] = {"channels", "depth", "norm",
					"activation", "init", NULL};

#define MAX_DEPTH 4

enum { NORM_NONE, NORM_INSTANCE, NORM_LAYER };

static int norm_act(apf_net *net, int t, int norm, int act, const char *name)
{
	if (t >= 0 && norm == NORM_INSTANCE)
		t = apf_net_instnorm(net, t, 1e-5f, name);
	else if (t >= 0 && norm == NORM_LAYER)
		t = apf_net_layernorm(net, t, 1e-5f, name);
	return t < 0 ? t : apf_net_activation(net, t, act);
}

/* conv 3x3 -> norm -> act, twice, named prefix.conv<j> / prefix.norm<j> */
static int block(apf_net *net, int t, int width, int norm, int act,
		 const char *prefix)
{
	char n[64];
	for (int j = 1; t >= 0 && j <= 2; j++) {
		snprintf(n, sizeof n, "%s.conv%d", prefix, j);
		t = apf_net_conv2d(net, t, width, 3, 1, 1, norm == NORM_NONE, n);
		snprintf(n, sizeof n, "%s.norm%d", prefix, j);
		t = norm_act(net, t, norm, act, n);
	}
	return t;
}

static int unet_build(apf_net **out, apf_backend *be,
		      const apf_workload_spec *w, const char *variant, int H,
		      int W, int C, int classes)
{
	*out = NULL;
	long width, depth;
	const char *norm_name, *act_name;
	int rc = apf_model_long(&width, w, variant, "channels", 16, 1, 1024);
	if (!rc)
		rc = apf_model_long(&depth, w, variant, "depth", 2, 1, MAX_DEPTH);
	if (rc)
		return rc;
	apf_model_string(&norm_name, w, variant, "norm", "instance");
	apf_model_string(&act_name, w, variant, "activation", "relu");
	int act = apf_activation_parse(act_name);
	int norm = !strcmp(norm_name, "instance")    ? NORM_INSTANCE
		   : !strcmp(norm_name, "layernorm") ? NORM_LAYER
		   : !strcmp(norm_name, "none")	     ? NORM_NONE
						     : -1;
	if (!act)
		return apf_error(APF_EINPUT, "[model] activation",
				 "'%s' (relu, gelu, silu, tanh)", act_name);
	if (norm < 0)
		return apf_error(APF_EINPUT, "[model] norm",
				 "'%s' (instance, layernorm, none)", norm_name);
	if (H % (1 << depth) || W % (1 << depth))
		return apf_error(APF_EINPUT, "[model] depth",
				 "%ld down-samplings of a %dx%d image", depth, H,
				 W);
	if (classes != 1)
		return apf_error(APF_EINPUT, "unet",
				 "one output image, asked for %d", classes);
	apf_net *net = NULL;
	rc = apf_net_new(&net, be, H, W, C);
	if (rc)
		return rc;
	int skip[MAX_DEPTH + 1], t = 0;
	char n[64];
	for (int i = 1; t >= 0 && i <= depth + 1; i++) {
		if (i > 1)
			t = apf_net_avgpool2d(net, t, 2, 2, 0);
		snprintf(n, sizeof n, "down%d", i);
		t = block(net, t, (int)width << (i - 1), norm, act, n);
		skip[i - 1] = t;
	}
	for (int i = (int)depth; t >= 0 && i >= 1; i--) {
		int wd = (int)width << (i - 1);
		snprintf(n, sizeof n, "up%d.conv", i);
		t = apf_net_upconv2x2(net, t, wd, norm == NORM_NONE, n);
		snprintf(n, sizeof n, "up%d.norm", i);
		t = norm_act(net, t, norm, act, n);
		if (t >= 0)
			t = apf_net_concat(net, skip[i - 1], t);
		snprintf(n, sizeof n, "up%d.block", i);
		t = block(net, t, wd, norm, act, n);
	}
	if (t >= 0)
		t = apf_net_conv2d(net, t, C, 1, 1, 0, 1, "out");
	rc = t < 0 ? t : apf_net_finish(net, t);
	if (rc) {
		apf_net_free(net);
		return rc;
	}
	*out = net;
	return 0;
}

const struct apf_model_def apf_model_unet = {"unet", unet_keys, unet_build};
