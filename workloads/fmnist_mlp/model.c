/*
 * model.c (fmnist_mlp): the multilayer perceptron, model name "mlp".
 *
 * [model] keys:
 *   hidden          widths of the hidden layers, "1024, 1024"
 *   activation      relu | gelu | silu | tanh
 *   norm            none | layernorm | batchnorm (after each hidden linear)
 *   dropout         rate after each hidden activation (0: none)
 *   init            kaiming_uniform | he_normal | lecun_normal
 *   label_smoothing of the training loss
 *
 * Layer names are "fc<i>" and "norm<i>" from 1, the output layer "out", so a
 * parameter table reads like the model.
 */
#include "workload/workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const mlp_keys[] = {"hidden", "activation", "norm",
				       "dropout", "init", "label_smoothing",
				       NULL};

#define MAX_HIDDEN 16

static int mlp_build(apf_net **out, apf_backend *be, const apf_workload_spec *w,
		     const char *variant, int H, int W, int C, int classes)
{
	*out = NULL;
	int widths[MAX_HIDDEN], nh;
	int rc = apf_model_widths(w, variant, "hidden", "1024, 1024", MAX_HIDDEN,
				  widths, &nh);
	const char *act_name, *norm;
	double dropout;
	apf_model_string(&act_name, w, variant, "activation", "relu");
	apf_model_string(&norm, w, variant, "norm", "none");
	if (!rc)
		rc = apf_model_double(&dropout, w, variant, "dropout", 0.0, 0.0,
				      0.9);
	int act = apf_activation_parse(act_name);
	if (!rc && !act)
		rc = apf_error(APF_EINPUT, "[model] activation",
			       "'%s' (relu, gelu, silu, "
			       "tanh)",
			       act_name);
	int use_ln = !strcmp(norm, "layernorm"), use_bn = !strcmp(norm, "batchnorm");
	if (!rc && !use_ln && !use_bn && strcmp(norm, "none"))
		rc = apf_error(APF_EINPUT, "[model] norm",
			       "'%s' (none, layernorm, batchnorm)",
			       norm);
	apf_net *net = NULL;
	if (!rc)
		rc = apf_net_new(&net, be, 1, 1, H * W * C);
	int t = 0;
	for (int i = 0; !rc && i < nh; i++) {
		char name[32];
		snprintf(name, sizeof name, "fc%d", i + 1);
		t = apf_net_linear(net, t, widths[i], !use_ln && !use_bn, name);
		snprintf(name, sizeof name, "norm%d", i + 1);
		if (t >= 0 && use_ln)
			t = apf_net_layernorm(net, t, 1e-5f, name);
		if (t >= 0 && use_bn)
			t = apf_net_batchnorm(net, t, 0.1f, 1e-5f, name);
		if (t >= 0)
			t = apf_net_activation(net, t, act);
		if (t >= 0 && dropout > 0.0)
			t = apf_net_dropout(net, t, (float)dropout);
		rc = t < 0 ? t : 0;
	}
	if (!rc) {
		t = apf_net_linear(net, t, classes, 1, "out");
		rc = t < 0 ? t : apf_net_finish(net, t);
	}
	if (rc) {
		apf_net_free(net);
		return rc;
	}
	*out = net;
	return 0;
}

const struct apf_model_def apf_model_mlp = {"mlp", mlp_keys, mlp_build};
