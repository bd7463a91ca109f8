/*
 * model.c (text_lm): a decoder-only Transformer language model over byte
 * tokens, model name "transformer" (GPT-2's layout at a small size).
 *
 *   tokens (B, T) -> token embedding (V, D) + learned positions (T, D)
 *   -> L blocks -> [final layer norm] -> linear D -> V at every position
 *
 * A pre-LN block (norm = pre, GPT-2):
 *   x = x + proj(attention(qkv(ln1(x))))
 *   x = x + down(mlp(up(ln2(x))))
 * a post-LN block (norm = post, the original Transformer; no final norm):
 *   x = ln1(x + proj(attention(qkv(x))))
 *   x = ln2(x + down(mlp(up(x))))
 * attention: causal, `heads` heads, scores scaled by temperature /
 * sqrt(D / heads); mlp: activation(up) with up D -> hidden, or a gated
 * unit (glu: GEGLU for gelu, SwiGLU for silu) with up D -> 2 hidden.
 *
 * [model] keys:
 *   width           D, a multiple of heads
 *   layers          L
 *   heads           attention heads
 *   mlp_hidden      hidden width of the MLP (default 4 D)
 *   mlp             plain | glu
 *   norm            pre | post
 *   temperature     multiplies the attention scores' 1/sqrt(head width)
 *   activation      gelu | relu | silu | tanh
 *   embedding_init  token and position embeddings start uniform in [-b, b]
 *   dropout         after the attention projection and the MLP (0: none)
 *   init            kaiming_uniform | he_normal | lecun_normal
 *
 * Parameter names: tok, pos, block<i>.{ln1, qkv, proj, ln2, up, down},
 * ln_f, head. The context and the vocabulary come from the dataset
 * ([dataset] context, vocab).
 */
#include "workload/workload.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const lm_keys[] = {
	"width",       "layers",     "heads",	      "mlp_hidden",
	"mlp",	       "norm",	     "temperature",    "activation",
	"embedding_init", "dropout", "init",	      NULL};

struct lm_cfg {
	long D, L, heads, hidden;
	int glu, post, act;
	double temperature, emb_init, dropout;
};

static int lm_config(struct lm_cfg *c, const apf_workload_spec *w,
		     const char *variant)
{
	const char *mlp, *norm, *act_name;
	int rc = apf_model_long(&c->D, w, variant, "width", 128, 8, 4096);
	if (!rc)
		rc = apf_model_long(&c->L, w, variant, "layers", 2, 1, 64);
	if (!rc)
		rc = apf_model_long(&c->heads, w, variant, "heads", 4, 1, 64);
	if (!rc)
		rc = apf_model_long(&c->hidden, w, variant, "mlp_hidden", 4 * c->D,
				    1, 65536);
	if (!rc)
		rc = apf_model_double(&c->temperature, w, variant, "temperature", 1.0,
				      1e-3, 1e3);
	if (!rc)
		rc = apf_model_double(&c->emb_init, w, variant, "embedding_init", 0.05,
				      0.0, 10.0);
	if (!rc)
		rc = apf_model_double(&c->dropout, w, variant, "dropout", 0.0, 0.0,
				      0.9);
	if (rc)
		return rc;
	apf_model_string(&mlp, w, variant, "mlp", "plain");
	apf_model_string(&norm, w, variant, "norm", "pre");
	apf_model_string(&act_name, w, variant, "activation", "gelu");
	c->act = apf_activation_parse(act_name);
	c->glu = !strcmp(mlp, "glu");
	c->post = !strcmp(norm, "post");
	if (!c->act)
		return apf_error(APF_EINPUT, "[model] activation",
				 "'%s' (relu, gelu, silu, tanh)", act_name);
	if (!c->glu && strcmp(mlp, "plain"))
		return apf_error(APF_EINPUT, "[model] mlp", "'%s' (plain, glu)",
				 mlp);
	if (!c->post && strcmp(norm, "pre"))
		return apf_error(APF_EINPUT, "[model] norm", "'%s' (pre, post)",
				 norm);
	if (c->D % c->heads)
		return apf_error(APF_EINPUT, "[model] heads",
				 "width %ld is not a multiple of %ld heads",
				 c->D, c->heads);
	return 0;
}

/* x + [dropout] y, the residual join of a block's branch. */
static int join(apf_net *net, int x, int y, double dropout)
{
	if (y >= 0 && dropout > 0.0)
		y = apf_net_dropout(net, y, (float)dropout);
	return y < 0 ? y : apf_net_add(net, x, y);
}

static int block(apf_net *net, int x, const struct lm_cfg *c, int i)
{
	char n[48];
	int h = x;
	if (!c->post) {
		snprintf(n, sizeof n, "block%d.ln1", i);
		h = apf_net_layernorm(net, x, 1e-5f, n);
	}
	snprintf(n, sizeof n, "block%d.qkv", i);
	if (h >= 0)
		h = apf_net_dense(net, h, 3 * (int)c->D, 1, n);
	float scale = (float)(c->temperature / sqrt((double)c->D / c->heads));
	if (h >= 0)
		h = apf_net_attention(net, h, (int)c->heads, scale);
	snprintf(n, sizeof n, "block%d.proj", i);
	if (h >= 0)
		h = apf_net_dense(net, h, (int)c->D, 1, n);
	x = h < 0 ? h : join(net, x, h, c->dropout);
	snprintf(n, sizeof n, "block%d.ln1", i);
	if (x >= 0 && c->post)
		x = apf_net_layernorm(net, x, 1e-5f, n);
	if (x < 0)
		return x;
	h = x;
	snprintf(n, sizeof n, "block%d.ln2", i);
	if (!c->post)
		h = apf_net_layernorm(net, x, 1e-5f, n);
	snprintf(n, sizeof n, "block%d.up", i);
	int up = (int)c->hidden * (c->glu ? 2 : 1);
	if (h >= 0)
		h = apf_net_dense(net, h, up, 1, n);
	if (h >= 0)
		h = c->glu ? apf_net_glu(net, h, c->act)
			   : apf_net_activation(net, h, c->act);
	snprintf(n, sizeof n, "block%d.down", i);
	if (h >= 0)
		h = apf_net_dense(net, h, (int)c->D, 1, n);
	x = h < 0 ? h : join(net, x, h, c->dropout);
	snprintf(n, sizeof n, "block%d.ln2", i);
	if (x >= 0 && c->post)
		x = apf_net_layernorm(net, x, 1e-5f, n);
	return x;
}

static int lm_build(apf_net **out, apf_backend *be, const apf_workload_spec *w,
		    const char *variant, int H, int W, int C, int classes)
{
	(void)H, (void)W, (void)C;
	*out = NULL;
	struct lm_cfg c;
	int T, V;
	int rc = lm_config(&c, w, variant);
	if (!rc)
		rc = apf_workload_tokens(w, &T, &V);
	if (!rc && T == 0)
		rc = apf_error(APF_EINPUT, "transformer",
			       "the dataset is not of format tokens");
	if (!rc && classes != V)
		rc = apf_error(APF_EINPUT, "transformer",
			       "%d outputs asked for a vocabulary of %d",
			       classes, V);
	apf_net *net = NULL;
	if (!rc)
		rc = apf_net_new(&net, be, 1, 1, 0);
	if (!rc)
		rc = apf_net_index_input(net, T + 1);
	int x = rc ? rc
		   : apf_net_token_embedding(net, 0, T, V, (int)c.D,
					     (float)c.emb_init, "tok");
	if (x >= 0)
		x = apf_net_position(net, x, (float)c.emb_init, "pos");
	for (int i = 1; x >= 0 && i <= c.L; i++)
		x = block(net, x, &c, i);
	if (x >= 0 && !c.post)
		x = apf_net_layernorm(net, x, 1e-5f, "ln_f");
	if (x >= 0)
		x = apf_net_dense(net, x, V, 1, "head");
	if (!rc)
		rc = x < 0 ? x : apf_net_finish(net, x);
	if (rc) {
		apf_net_free(net);
		return rc;
	}
	*out = net;
	return 0;
}

const struct apf_model_def apf_model_transformer = {"transformer", lm_keys,
						    lm_build};
