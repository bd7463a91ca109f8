/*
 * model.c (clicks_dlrm): DLRM (Naumov et al., 2019), model name "dlrm".
 *
 *   dense (B, n_dense) -> bottom MLP -> (B, D)
 *   categorical ids (B, n_cat) -> one embedding table per feature -> (B, n_cat, D)
 *   dot interaction: the bottom output and the n_cat embeddings, F = n_cat + 1
 *     vectors; their F(F-1)/2 pairwise dots after the bottom output
 *   -> top MLP -> one logit -> sigmoid cross-entropy
 *
 * [model] keys:
 *   embedding_dim   D (the bottom MLP's last width must be D)
 *   bottom          widths of the bottom MLP, "64, 16"
 *   top             widths of the top MLP before the logit, "256, 128"
 *   norm            none | layernorm (after each hidden linear of both MLPs)
 *   top_residual    0 | 1: a top layer whose width equals the previous
 *                   one's adds its input to its output (x + act(lin(x)))
 *   embedding_init  embeddings start uniform in [-b, b]
 *   activation      relu | gelu | silu | tanh
 *   dropout         rate after each hidden top activation (0: none)
 *   init            kaiming_uniform | he_normal | lecun_normal
 *
 * Parameter names: bottom<i>, emb, top<i>, out; norms bottom<i>.norm and
 * top<i>.norm.
 */
#include "workload/workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dlrm_keys[] = {
	"embedding_dim", "bottom",     "top",	  "norm",    "top_residual",
	"embedding_init", "activation", "dropout", "init",    NULL};

#define MAX_LAYERS 16
#define MAX_CAT 4096

/* linear -> [layernorm] -> activation [-> dropout], named prefix<i>. */
static int hidden(apf_net *net, int t, int width, int ln, int act,
		  double dropout, const char *prefix, int i)
{
	char name[48];
	snprintf(name, sizeof name, "%s%d", prefix, i);
	t = apf_net_linear(net, t, width, !ln, name);
	snprintf(name, sizeof name, "%s%d.norm", prefix, i);
	if (t >= 0 && ln)
		t = apf_net_layernorm(net, t, 1e-5f, name);
	if (t >= 0)
		t = apf_net_activation(net, t, act);
	if (t >= 0 && dropout > 0.0)
		t = apf_net_dropout(net, t, (float)dropout);
	return t;
}

static int dlrm_build(apf_net **out, apf_backend *be,
		      const apf_workload_spec *w, const char *variant, int H,
		      int W, int C, int classes)
{
	*out = NULL;
	int bottom[MAX_LAYERS], top[MAX_LAYERS], nb, nt, ncat;
	long D, residual;
	double init_b, dropout;
	const char *norm, *act_name;
	int *rows = malloc(MAX_CAT * sizeof *rows);
	if (!rows)
		return apf_error(APF_ENOMEM, "dlrm", "out of memory");
	int rc = apf_model_widths(w, variant, "bottom", "64, 16", MAX_LAYERS,
				  bottom, &nb);
	if (!rc)
		rc = apf_model_widths(w, variant, "top", "256, 128",
				      MAX_LAYERS, top, &nt);
	if (!rc)
		rc = apf_model_long(&D, w, variant, "embedding_dim", 16, 1, 1024);
	if (!rc)
		rc = apf_model_long(&residual, w, variant, "top_residual", 0, 0,
				    1);
	if (!rc)
		rc = apf_model_double(&init_b, w, variant, "embedding_init", 0.05,
				      0.0, 10.0);
	if (!rc)
		rc = apf_model_double(&dropout, w, variant, "dropout", 0.0, 0.0,
				      0.9);
	apf_model_string(&norm, w, variant, "norm", "none");
	apf_model_string(&act_name, w, variant, "activation", "relu");
	int act = apf_activation_parse(act_name);
	int ln = !strcmp(norm, "layernorm");
	if (!rc && !act)
		rc = apf_error(APF_EINPUT, "[model] activation",
			       "'%s' (relu, gelu, silu, tanh)", act_name);
	if (!rc && !ln && strcmp(norm, "none"))
		rc = apf_error(APF_EINPUT, "[model] norm",
			       "'%s' (none, layernorm)", norm);
	if (!rc && bottom[nb - 1] != D)
		rc = apf_error(APF_EINPUT, "[model] bottom",
			       "the last width %d must be embedding_dim %ld",
			       bottom[nb - 1], D);
	if (!rc)
		rc = apf_workload_table_rows(w, rows, MAX_CAT, &ncat);
	if (!rc && ncat == 0)
		rc = apf_error(APF_EINPUT, "dlrm",
			       "the dataset declares no categorical_rows");
	if (!rc && classes != 1)
		rc = apf_error(APF_EINPUT, "dlrm",
			       "one logit for sigmoid_xent, asked for %d",
			       classes);
	apf_net *net = NULL;
	if (!rc)
		rc = apf_net_new(&net, be, 1, 1, H * W * C);
	if (!rc)
		rc = apf_net_index_input(net, ncat);
	int t = 0;
	for (int i = 0; !rc && i < nb; i++) {
		t = hidden(net, t, bottom[i], ln, act, 0.0, "bottom", i + 1);
		rc = t < 0 ? t : 0;
	}
	int e = rc ? -1
		   : apf_net_embedding(net, 0, ncat, rows, (int)D,
				       (float)init_b, "emb");
	if (!rc && e < 0)
		rc = e;
	if (!rc) {
		t = apf_net_interaction(net, t, e);
		rc = t < 0 ? t : 0;
	}
	int width = 0;
	for (int i = 0; !rc && i < nt; i++) {
		int prev = t;
		t = hidden(net, t, top[i], ln, act, dropout, "top", i + 1);
		if (t >= 0 && residual && i > 0 && top[i] == width)
			t = apf_net_add(net, t, prev);
		width = top[i];
		rc = t < 0 ? t : 0;
	}
	if (!rc) {
		t = apf_net_linear(net, t, 1, 1, "out");
		rc = t < 0 ? t : apf_net_finish(net, t);
	}
	free(rows);
	if (rc) {
		apf_net_free(net);
		return rc;
	}
	*out = net;
	return 0;
}

const struct apf_model_def apf_model_dlrm = {"dlrm", dlrm_keys, dlrm_build};
