/*
 * net.c: networks as a list of layers over numbered tensors (see nn.h).
 *
 * Building a net only records layers and assigns offsets: parameters and
 * model state get consecutive, 16-float aligned slices in creation order, so
 * the layout is a pure function of the model code and its keys. Nothing
 * trainable is allocated here; apf_net_bind points the layers at the
 * caller's memory.
 *
 * Backward walks the layers in reverse. Whether a layer writes or adds into
 * an input's gradient is fixed when the net is finished: the first consumer
 * met in reverse order writes, later ones accumulate. So tensors read twice
 * (residuals) sum their gradients in a fixed order without zeroing.
 *
 * Fusion. Where the backend has batchnorm_relu_*, finishing the net finds
 * batch norm -> ReLU and batch norm -> add -> ReLU chains whose inner
 * tensors nothing else reads, and runs each as one layer at the ReLU's
 * place: the inner tensors are never stored (nor allocated). Where it has
 * instnorm_relu_*, instance norm -> ReLU chains likewise. A chain is
 * fused only when no other layer between its norm and its ReLU reads
 * the chain's inputs, so every gradient is still written or accumulated in
 * the order the flags above assume.
 */
#include "nn/nn.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN_FLOATS 16

enum op_type {
	OP_LINEAR = 1,
	OP_CONV,
	OP_BATCHNORM,
	OP_LAYERNORM,
	OP_ACT,
	OP_MAXPOOL,
	OP_AVGPOOL,
	OP_GAP,
	OP_DROPOUT,
	OP_ADD,
	OP_EMBEDDING,
	OP_INTERACTION,
	OP_POSITION,
	OP_ATTENTION,
	OP_GLU,
	OP_UPCONV,
	OP_CONCAT,
	OP_INSTNORM,
};

struct tensor {
	int H, W, C;
	int fused; /* inside a fused chain: never stored */
	float *data; /* max_batch examples; tensor 0 points at the caller's x */
	float *grad;
};

struct op {
	int type;
	int in[2], nin, out;
	int accum[2];
	int param[2];  /* weight / scale, bias; -1 when absent */
	int state[2];  /* running mean, running var; -1 when absent */
	int act, K, S, P;
	float momentum, eps, p;
	int dropout_index;
	float *save_a, *save_b; /* bn: mean/rstd (C); ln: mean/rstd (rows) */
	int32_t *argmax;
	int fused_into;         /* runs inside the chain ending at this op */
	int fnorm, fadd;        /* a fused chain's tail: its norm and add ops */
	int fres, fres_accum;   /* the add's other input and its accum flag */
	int first, nfields;     /* embedding: its index columns */
	int32_t *offset;        /* embedding: field row offsets (backend) */
	int32_t *rows;          /* embedding: field sizes (host) */
	int V;                  /* embedding: rows of the table */
	int tokenwise;          /* linear: per position (rows B H W) */
	int heads;              /* attention */
	float scale;            /* attention: of the scores */
	float *att;             /* attention: probabilities (B,NH,T,T) */
};

struct apf_net {
	apf_backend *be;
	struct tensor *t;
	size_t nt, cap_t;
	struct op *ops;
	size_t nops, cap_ops;
	apf_param *params;
	size_t nparams, cap_params, param_floats;
	apf_state_entry *state;
	size_t nstate, cap_state, state_floats;
	int out;
	int nidx;               /* index inputs per example */
	const int32_t *idx, *host_idx; /* the forward's indices */
	int finished;
	int ndropout;
	float *bound_params, *bound_state;
	int max_batch, with_grads;
	float *work;
	size_t work_floats;
	int last_B, last_train; /* the forward backward continues */
	uint32_t last_key[2];
	uint64_t last_step;
};

static size_t tensor_numel(const struct tensor *t)
{
	return (size_t)t->H * t->W * t->C;
}

const char *apf_param_kind_name(int kind)
{
	static const char *const names[] = {
		NULL, "weight", "bias", "conv_weight", "norm_scale",
		"norm_bias", "embedding", "attention_q", "attention_k",
		"attention_v", "attention_out"};
	if (kind < 1 || kind > APF_PARAM_ATTN_OUT)
		return "unknown";
	return names[kind];
}

int apf_activation_parse(const char *name)
{
	if (!name)
		return 0;
	if (!strcmp(name, "relu"))
		return APF_ACT_RELU;
	if (!strcmp(name, "gelu"))
		return APF_ACT_GELU;
	if (!strcmp(name, "silu"))
		return APF_ACT_SILU;
	if (!strcmp(name, "tanh"))
		return APF_ACT_TANH;
	return 0;
}

const char *apf_activation_name(int act)
{
	switch (act) {
	case APF_ACT_RELU:
		return "relu";
	case APF_ACT_GELU:
		return "gelu";
	case APF_ACT_SILU:
		return "silu";
	case APF_ACT_TANH:
		return "tanh";
	}
	return "unknown";
}

/* ---- building ------------------------------------------------------------- */

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? 2 * *cap : 16;
	void *p = realloc(*v, nc * size);
	if (!p)
		return apf_error(APF_ENOMEM, "net", "out of memory");
	memset((char *)p + *cap * size, 0, (nc - *cap) * size);
	*v = p;
	*cap = nc;
	return 0;
}

int apf_net_new(apf_net **out, apf_backend *be, int H, int W, int C)
{
	*out = NULL;
	if (H <= 0 || W <= 0 || C < 0)
		return apf_error(APF_EINPUT, "net", "input shape %dx%dx%d",
				 H, W, C);
	apf_net *net = apf_calloc(1, sizeof *net);
	if (!net)
		return apf_error(APF_ENOMEM, "net", "out of memory");
	net->be = be;
	net->out = -1;
	int rc = grow((void **)&net->t, &net->cap_t, 0, sizeof *net->t);
	if (rc) {
		free(net);
		return rc;
	}
	net->t[0] = (struct tensor){H, W, C, 0, NULL, NULL};
	net->nt = 1;
	*out = net;
	return 0;
}

static void free_buffers(apf_net *net)
{
	apf_backend *be = net->be;
	for (size_t i = 1; i < net->nt; i++) {
		be->free(be, net->t[i].data);
		be->free(be, net->t[i].grad);
		net->t[i].data = net->t[i].grad = NULL;
	}
	for (size_t i = 0; i < net->nops; i++) {
		struct op *o = &net->ops[i];
		if (o->type == OP_LAYERNORM || o->type == OP_INSTNORM) {
			be->free(be, o->save_a);
			be->free(be, o->save_b);
			o->save_a = o->save_b = NULL;
		}
		be->free(be, o->att);
		o->att = NULL;
		be->free(be, o->argmax);
		o->argmax = NULL;
	}
	be->free(be, net->work);
	net->work = NULL;
	net->work_floats = 0;
	net->max_batch = 0;
	net->with_grads = 0;
}

void apf_net_free(apf_net *net)
{
	if (!net)
		return;
	free_buffers(net);
	for (size_t i = 0; i < net->nops; i++)
		if (net->ops[i].type == OP_BATCHNORM) {
			net->be->free(net->be, net->ops[i].save_a);
			net->be->free(net->be, net->ops[i].save_b);
		}
	for (size_t i = 0; i < net->nops; i++)
		if (net->ops[i].type == OP_EMBEDDING) {
			net->be->free(net->be, net->ops[i].offset);
			free(net->ops[i].rows);
		}
	free(net->t);
	free(net->ops);
	free(net->params);
	free(net->state);
	free(net);
}

static int check_in(apf_net *net, int in)
{
	if (net->finished)
		return apf_error(APF_EINTERNAL, "net",
				 "layer added after apf_net_finish");
	if (in < 0 || (size_t)in >= net->nt)
		return apf_error(APF_EINTERNAL, "net", "no tensor %d", in);
	if (tensor_numel(&net->t[in]) == 0)
		return apf_error(APF_EINPUT, "net",
				 "a layer reads the float input of a net that "
				 "has none (its inputs are indices)");
	return 0;
}

static int new_tensor(apf_net *net, int H, int W, int C)
{
	if (H <= 0 || W <= 0 || C <= 0)
		return apf_error(APF_EINPUT, "net",
				 "a layer's output would be %dx%dx%d", H, W, C);
	int rc = grow((void **)&net->t, &net->cap_t, net->nt, sizeof *net->t);
	if (rc)
		return rc;
	net->t[net->nt] = (struct tensor){H, W, C, 0, NULL, NULL};
	return (int)net->nt++;
}

static int new_op(struct op **out, apf_net *net, int type, int in0, int in1)
{
	int rc = grow((void **)&net->ops, &net->cap_ops, net->nops,
		      sizeof *net->ops);
	if (rc)
		return rc;
	struct op *o = &net->ops[net->nops++];
	memset(o, 0, sizeof *o);
	o->type = type;
	o->in[0] = in0;
	o->in[1] = in1;
	o->nin = in1 >= 0 ? 2 : 1;
	o->param[0] = o->param[1] = -1;
	o->state[0] = o->state[1] = -1;
	o->fused_into = o->fnorm = o->fadd = o->fres = -1;
	*out = o;
	return 0;
}

static size_t align_up(size_t n)
{
	return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
}

static int add_param(apf_net *net, const char *layer, const char *what,
		     int kind, int ndim, const int *shape, int fan_in)
{
	int rc = grow((void **)&net->params, &net->cap_params, net->nparams,
		      sizeof *net->params);
	if (rc)
		return rc;
	apf_param *p = &net->params[net->nparams];
	memset(p, 0, sizeof *p);
	if ((size_t)snprintf(p->name, sizeof p->name, "%s.%s", layer, what) >=
	    sizeof p->name)
		return apf_error(APF_EINPUT, layer, "parameter name too long");
	for (size_t i = 0; i < net->nparams; i++)
		if (!strcmp(net->params[i].name, p->name))
			return apf_error(APF_EINPUT, p->name,
					 "two parameters with this name");
	p->kind = kind;
	p->ndim = ndim;
	p->numel = 1;
	for (int i = 0; i < ndim; i++) {
		p->shape[i] = shape[i];
		p->numel *= (size_t)shape[i];
	}
	p->fan_in = fan_in;
	p->offset = net->param_floats;
	net->param_floats = align_up(net->param_floats + p->numel);
	return (int)net->nparams++;
}

static int add_state(apf_net *net, const char *layer, const char *what,
		     size_t numel)
{
	int rc = grow((void **)&net->state, &net->cap_state, net->nstate,
		      sizeof *net->state);
	if (rc)
		return rc;
	apf_state_entry *s = &net->state[net->nstate];
	if ((size_t)snprintf(s->name, sizeof s->name, "%s.%s", layer, what) >=
	    sizeof s->name)
		return apf_error(APF_EINPUT, layer, "state name too long");
	s->numel = numel;
	s->offset = net->state_floats;
	net->state_floats = align_up(net->state_floats + numel);
	return (int)net->nstate++;
}

static int linear_layer(apf_net *net, int in, int out_features, int bias,
			const char *name, int tokenwise)
{
	int rc = check_in(net, in);
	if (rc)
		return rc;
	struct tensor x = net->t[in];
	int C = tokenwise ? x.C : (int)tensor_numel(&x);
	int t = tokenwise ? new_tensor(net, x.H, x.W, out_features)
			  : new_tensor(net, 1, 1, out_features);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_LINEAR, in, -1);
	if (rc)
		return rc;
	o->out = t;
	o->tokenwise = tokenwise;
	int wshape[2] = {out_features, C};
	if ((o->param[0] = add_param(net, name, "weight", APF_PARAM_WEIGHT, 2,
				     wshape, C)) < 0)
		return o->param[0];
	if (bias && (o->param[1] = add_param(net, name, "bias", APF_PARAM_BIAS,
					     1, &out_features, C)) < 0)
		return o->param[1];
	return t;
}

int apf_net_linear(apf_net *net, int in, int out_features, int bias,
		   const char *name)
{
	return linear_layer(net, in, out_features, bias, name, 0);
}

int apf_net_dense(apf_net *net, int in, int out_features, int bias,
		  const char *name)
{
	return linear_layer(net, in, out_features, bias, name, 1);
}

int apf_net_conv2d(apf_net *net, int in, int out_channels, int kernel,
		   int stride, int pad, int bias, const char *name)
{
	int rc = check_in(net, in);
	if (rc)
		return rc;
	if (kernel <= 0 || stride <= 0 || pad < 0 || pad >= kernel)
		return apf_error(APF_EINPUT, name,
				 "conv kernel %d, stride %d, padding %d",
				 kernel, stride, pad);
	struct tensor x = net->t[in];
	int OH = (x.H + 2 * pad - kernel) / stride + 1;
	int OW = (x.W + 2 * pad - kernel) / stride + 1;
	int t = new_tensor(net, OH, OW, out_channels);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_CONV, in, -1);
	if (rc)
		return rc;
	o->out = t;
	o->K = kernel, o->S = stride, o->P = pad;
	int wshape[4] = {out_channels, kernel, kernel, x.C};
	int fan_in = kernel * kernel * x.C;
	if ((o->param[0] = add_param(net, name, "weight",
				     APF_PARAM_CONV_WEIGHT, 4, wshape,
				     fan_in)) < 0)
		return o->param[0];
	if (bias && (o->param[1] = add_param(net, name, "bias", APF_PARAM_BIAS,
					     1, &out_channels, fan_in)) < 0)
		return o->param[1];
	return t;
}

static int norm_layer(apf_net *net, int type, int in, float momentum,
		      float eps, const char *name)
{
	int rc = check_in(net, in);
	if (rc)
		return rc;
	struct tensor x = net->t[in];
	int t = new_tensor(net, x.H, x.W, x.C);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, type, in, -1);
	if (rc)
		return rc;
	o->out = t;
	o->momentum = momentum;
	o->eps = eps;
	if ((o->param[0] = add_param(net, name, "scale", APF_PARAM_NORM_SCALE,
				     1, &x.C, x.C)) < 0)
		return o->param[0];
	if ((o->param[1] = add_param(net, name, "bias", APF_PARAM_NORM_BIAS, 1,
				     &x.C, x.C)) < 0)
		return o->param[1];
	if (type == OP_BATCHNORM) {
		if ((o->state[0] = add_state(net, name, "running_mean",
					     (size_t)x.C)) < 0)
			return o->state[0];
		if ((o->state[1] = add_state(net, name, "running_var",
					     (size_t)x.C)) < 0)
			return o->state[1];
		/* Batch statistics are per channel, independent of the batch
		 * size, so they are allocated once here. */
		int rc2 = net->be->alloc(net->be, (size_t)x.C * sizeof(float),
					 (void **)&o->save_a);
		if (!rc2)
			rc2 = net->be->alloc(net->be,
					     (size_t)x.C * sizeof(float),
					     (void **)&o->save_b);
		if (rc2)
			return rc2;
	}
	return t;
}

int apf_net_batchnorm(apf_net *net, int in, float momentum, float eps,
		      const char *name)
{
	return norm_layer(net, OP_BATCHNORM, in, momentum, eps, name);
}

int apf_net_layernorm(apf_net *net, int in, float eps, const char *name)
{
	return norm_layer(net, OP_LAYERNORM, in, 0.0f, eps, name);
}

static int same_shape_op(apf_net *net, int type, int in)
{
	int rc = check_in(net, in);
	if (rc)
		return rc;
	struct tensor x = net->t[in];
	int t = new_tensor(net, x.H, x.W, x.C);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, type, in, -1);
	if (rc)
		return rc;
	o->out = t;
	return t;
}

int apf_net_activation(apf_net *net, int in, int act)
{
	if (act < APF_ACT_RELU || act > APF_ACT_TANH)
		return apf_error(APF_EINPUT, "net", "unknown activation %d",
				 act);
	int t = same_shape_op(net, OP_ACT, in);
	if (t >= 0)
		net->ops[net->nops - 1].act = act;
	return t;
}

static int pool(apf_net *net, int type, int in, int K, int S, int P)
{
	int rc = check_in(net, in);
	if (rc)
		return rc;
	if (K <= 0 || S <= 0 || P < 0 || P >= K)
		return apf_error(APF_EINPUT, "net",
				 "pooling window %d, stride %d, padding %d", K,
				 S, P);
	struct tensor x = net->t[in];
	int t = new_tensor(net, (x.H + 2 * P - K) / S + 1,
			   (x.W + 2 * P - K) / S + 1, x.C);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, type, in, -1);
	if (rc)
		return rc;
	o->out = t;
	o->K = K, o->S = S, o->P = P;
	return t;
}

int apf_net_maxpool2d(apf_net *net, int in, int kernel, int stride, int pad)
{
	return pool(net, OP_MAXPOOL, in, kernel, stride, pad);
}

int apf_net_avgpool2d(apf_net *net, int in, int kernel, int stride, int pad)
{
	return pool(net, OP_AVGPOOL, in, kernel, stride, pad);
}

int apf_net_global_avgpool(apf_net *net, int in)
{
	int rc = check_in(net, in);
	if (rc)
		return rc;
	int t = new_tensor(net, 1, 1, net->t[in].C);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_GAP, in, -1);
	if (rc)
		return rc;
	o->out = t;
	return t;
}

int apf_net_dropout(apf_net *net, int in, float p)
{
	if (!(p >= 0.0f && p < 1.0f))
		return apf_error(APF_EINPUT, "net",
				 "dropout rate %g outside [0, 1)", p);
	int t = same_shape_op(net, OP_DROPOUT, in);
	if (t >= 0) {
		net->ops[net->nops - 1].p = p;
		net->ops[net->nops - 1].dropout_index = net->ndropout++;
	}
	return t;
}

int apf_net_add(apf_net *net, int a, int b)
{
	int rc = check_in(net, a);
	if (!rc)
		rc = check_in(net, b);
	if (rc)
		return rc;
	struct tensor x = net->t[a], y = net->t[b];
	if (x.H != y.H || x.W != y.W || x.C != y.C)
		return apf_error(APF_EINPUT, "net",
				 "adding tensors of shapes %dx%dx%d and "
				 "%dx%dx%d",
				 x.H, x.W, x.C, y.H, y.W, y.C);
	int t = new_tensor(net, x.H, x.W, x.C);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_ADD, a, b);
	if (rc)
		return rc;
	o->out = t;
	return t;
}

int apf_net_index_input(apf_net *net, int n)
{
	if (net->finished || net->nidx || net->nops)
		return apf_error(APF_EINTERNAL, "net",
				 "index inputs are declared once, before the "
				 "layers");
	if (n <= 0 || n > 1 << 20)
		return apf_error(APF_EINPUT, "net", "%d index inputs", n);
	net->nidx = n;
	return 0;
}

int apf_net_index_count(const apf_net *net)
{
	return net->nidx;
}

/* An embedding of nfields index columns from `first`: one table of the
 * fields' rows stacked (offsets), or (shared) one table of rows[0] rows
 * that every field reads (offset NULL). */
static int embedding_layer(apf_net *net, int first, int nfields,
			   const int *rows, int shared, int D,
			   float init_bound, const char *name)
{
	if (net->finished)
		return apf_error(APF_EINTERNAL, "net",
				 "layer added after apf_net_finish");
	if (first < 0 || nfields <= 0 || first + nfields > net->nidx)
		return apf_error(APF_EINPUT, name,
				 "embedding of index inputs [%d, %d) with %d "
				 "declared",
				 first, first + nfields, net->nidx);
	if (D <= 0 || !(init_bound >= 0.0f))
		return apf_error(APF_EINPUT, name, "embedding width %d", D);
	long V = 0;
	for (int f = 0; f < (shared ? 1 : nfields); f++) {
		if (rows[f] <= 0 || V + rows[f] > (1L << 30))
			return apf_error(APF_EINPUT, name,
					 "field %d has %d rows", f, rows[f]);
		V += rows[f];
	}
	int t = new_tensor(net, 1, nfields, D);
	if (t < 0)
		return t;
	struct op *o;
	int rc = new_op(&o, net, OP_EMBEDDING, 0, -1);
	if (rc)
		return rc;
	o->nin = 0; /* reads indices, not a tensor */
	o->out = t;
	o->first = first;
	o->nfields = nfields;
	o->V = (int)V;
	int wshape[2] = {(int)V, D};
	int pi = add_param(net, name, "weight", APF_PARAM_EMBEDDING, 2, wshape,
			   D);
	if (pi < 0)
		return pi;
	net->params[pi].init_bound = init_bound;
	o = &net->ops[net->nops - 1];
	o->param[0] = pi;
	int32_t *off = malloc((size_t)nfields * sizeof *off);
	o->rows = malloc((size_t)nfields * sizeof *o->rows);
	if (!off || !o->rows) {
		free(off);
		return apf_error(APF_ENOMEM, name, "out of memory");
	}
	for (int f = 0, acc = 0; f < nfields; f++) {
		off[f] = acc;
		o->rows[f] = shared ? rows[0] : rows[f];
		acc += shared ? 0 : rows[f];
	}
	if (!shared) {
		rc = net->be->alloc(net->be, (size_t)nfields * sizeof *off,
				    (void **)&o->offset);
		if (!rc)
			net->be->upload(net->be, o->offset, off,
					(size_t)nfields * sizeof *off);
	}
	free(off);
	return rc ? rc : t;
}

int apf_net_embedding(apf_net *net, int first, int nfields, const int *rows,
		      int D, float init_bound, const char *name)
{
	return embedding_layer(net, first, nfields, rows, 0, D, init_bound,
			       name);
}

int apf_net_token_embedding(apf_net *net, int first, int T, int V, int D,
			    float init_bound, const char *name)
{
	return embedding_layer(net, first, T, &V, 1, D, init_bound, name);
}

int apf_net_position(apf_net *net, int in, float init_bound, const char *name)
{
	int rc = check_in(net, in);
	if (rc)
		return rc;
	if (!(init_bound >= 0.0f))
		return apf_error(APF_EINPUT, name, "init bound %g", init_bound);
	struct tensor x = net->t[in];
	int t = new_tensor(net, x.H, x.W, x.C);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_POSITION, in, -1);
	if (rc)
		return rc;
	o->out = t;
	int shape[2] = {x.H * x.W, x.C};
	int pi = add_param(net, name, "weight", APF_PARAM_EMBEDDING, 2, shape,
			   x.C);
	if (pi < 0)
		return pi;
	net->params[pi].init_bound = init_bound;
	net->ops[net->nops - 1].param[0] = pi;
	return t;
}

int apf_net_attention(apf_net *net, int qkv, int heads, float scale)
{
	int rc = check_in(net, qkv);
	if (rc)
		return rc;
	struct tensor x = net->t[qkv];
	if (x.H != 1 || x.C % 3 || heads <= 0 || (x.C / 3) % heads ||
	    !(scale > 0.0f))
		return apf_error(APF_EINPUT, "net",
				 "attention of %d heads (scale %g) over "
				 "%dx%dx%d: needs (1, T, 3C), C a multiple of "
				 "the heads",
				 heads, scale, x.H, x.W, x.C);
	int t = new_tensor(net, 1, x.W, x.C / 3);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_ATTENTION, qkv, -1);
	if (rc)
		return rc;
	o->out = t;
	o->heads = heads;
	o->scale = scale;
	return t;
}

int apf_net_upconv2x2(apf_net *net, int in, int out_channels, int bias,
		      const char *name)
{
	int rc = check_in(net, in);
	if (rc)
		return rc;
	struct tensor x = net->t[in];
	int t = new_tensor(net, 2 * x.H, 2 * x.W, out_channels);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_UPCONV, in, -1);
	if (rc)
		return rc;
	o->out = t;
	int wshape[4] = {out_channels, 2, 2, x.C};
	/* each output sums x.C inputs (one tap of the 2x2 kernel) */
	if ((o->param[0] = add_param(net, name, "weight", APF_PARAM_CONV_WEIGHT,
				     4, wshape, x.C)) < 0)
		return o->param[0];
	if (bias && (o->param[1] = add_param(net, name, "bias", APF_PARAM_BIAS,
					     1, &out_channels, x.C)) < 0)
		return o->param[1];
	return t;
}

int apf_net_concat(apf_net *net, int a, int b)
{
	int rc = check_in(net, a);
	if (!rc)
		rc = check_in(net, b);
	if (rc)
		return rc;
	struct tensor x = net->t[a], y = net->t[b];
	if (x.H != y.H || x.W != y.W || a == b)
		return apf_error(APF_EINPUT, "net",
				 "concatenating tensors of shapes %dx%dx%d and "
				 "%dx%dx%d",
				 x.H, x.W, x.C, y.H, y.W, y.C);
	int t = new_tensor(net, x.H, x.W, x.C + y.C);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_CONCAT, a, b);
	if (rc)
		return rc;
	o->out = t;
	return t;
}

int apf_net_instnorm(apf_net *net, int in, float eps, const char *name)
{
	return norm_layer(net, OP_INSTNORM, in, 0.0f, eps, name);
}

int apf_net_glu(apf_net *net, int in, int act)
{
	int rc = check_in(net, in);
	if (rc)
		return rc;
	struct tensor x = net->t[in];
	if (act < APF_ACT_RELU || act > APF_ACT_TANH || x.C % 2)
		return apf_error(APF_EINPUT, "net",
				 "a gated unit (activation %d) of %d "
				 "features: needs an even count",
				 act, x.C);
	int t = new_tensor(net, x.H, x.W, x.C / 2);
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_GLU, in, -1);
	if (rc)
		return rc;
	o->out = t;
	o->act = act;
	return t;
}

int apf_net_interaction(apf_net *net, int dense, int emb)
{
	int rc = check_in(net, dense);
	if (!rc)
		rc = check_in(net, emb);
	if (rc)
		return rc;
	struct tensor x = net->t[dense], e = net->t[emb];
	int D = (int)tensor_numel(&x);
	if (e.C != D || e.H != 1)
		return apf_error(APF_EINPUT, "net",
				 "interaction of a %d-vector with embeddings "
				 "%dx%dx%d",
				 D, e.H, e.W, e.C);
	long F = (long)e.W + 1;
	int t = new_tensor(net, 1, 1, (int)(D + F * (F - 1) / 2));
	if (t < 0)
		return t;
	struct op *o;
	rc = new_op(&o, net, OP_INTERACTION, dense, emb);
	if (rc)
		return rc;
	o->out = t;
	return t;
}

/* Whether an op strictly between ops lo and hi, other than skip, reads
 * tensor t. */
static int read_between(const apf_net *net, size_t lo, size_t hi, size_t skip,
			int t)
{
	for (size_t i = lo + 1; i < hi; i++)
		if (i != skip)
			for (int k = 0; k < net->ops[i].nin; k++)
				if (net->ops[i].in[k] == t)
					return 1;
	return 0;
}

/* Marks the batch norm (-> add) -> ReLU and instance norm -> ReLU chains to
 * run fused, each where the backend has its kernels (see the top of this
 * file). */
static int fuse_chains(apf_net *net)
{
	int *prod = malloc(net->nt * sizeof *prod);
	int *uses = apf_calloc(net->nt, sizeof *uses);
	if (!prod || !uses) {
		free(prod);
		free(uses);
		return apf_error(APF_ENOMEM, "net", "out of memory");
	}
	for (size_t t = 0; t < net->nt; t++)
		prod[t] = -1;
	for (size_t i = 0; i < net->nops; i++) {
		prod[net->ops[i].out] = (int)i;
		for (int k = 0; k < net->ops[i].nin; k++)
			uses[net->ops[i].in[k]]++;
	}
	int bn_ok = net->be->batchnorm_relu_forward &&
		    net->be->batchnorm_relu_backward;
	int in_ok = net->be->instnorm_relu_forward &&
		    net->be->instnorm_relu_backward;
	for (size_t i = 0; i < net->nops; i++) {
		struct op *a = &net->ops[i];
		int tin = a->in[0];
		if (a->type != OP_ACT || a->act != APF_ACT_RELU || tin == 0 ||
		    uses[tin] != 1 || tin == net->out)
			continue;
		int p = prod[tin], norm = -1, add = -1, res = -1, rk = 0;
		if ((net->ops[p].type == OP_BATCHNORM && bn_ok) ||
		    (net->ops[p].type == OP_INSTNORM && in_ok)) {
			norm = p;
		} else if (net->ops[p].type == OP_ADD && bn_ok) {
			for (int k = 0; k < 2 && norm < 0; k++) {
				int x = net->ops[p].in[k], q = prod[x];
				if (x != 0 && q >= 0 && uses[x] == 1 &&
				    x != net->out &&
				    net->ops[q].type == OP_BATCHNORM) {
					norm = q, add = p;
					res = net->ops[p].in[1 - k], rk = 1 - k;
				}
			}
		}
		if (norm < 0)
			continue;
		struct op *b = &net->ops[norm];
		if (read_between(net, (size_t)norm, i,
				 add < 0 ? i : (size_t)add, b->in[0]) ||
		    (add >= 0 && read_between(net, (size_t)add, i, i, res)))
			continue;
		b->fused_into = (int)i;
		net->t[b->out].fused = 1;
		if (add >= 0) {
			net->ops[add].fused_into = (int)i;
			net->t[net->ops[add].out].fused = 1;
			a->fres = res;
			a->fres_accum = net->ops[add].accum[rk];
		}
		a->fnorm = norm;
		a->fadd = add;
	}
	free(prod);
	free(uses);
	return 0;
}

/* ---- what each layer needs of the backend ---------------------------------
 *
 * A backend may leave entries it has no kernel for NULL (the CUDA plugin
 * does); a net is refused at apf_net_finish, naming the layer and the
 * entry, rather than calling through NULL in its first forward. */

#define BE_ENTRY(f) {offsetof(apf_backend, f), #f}
#define OP_MAX_ENTRIES 4

static const struct op_needs {
	int type;
	const char *layer;
	struct {
		size_t off;
		const char *name;
	} entry[OP_MAX_ENTRIES];
} op_needs[] = {
	{OP_LINEAR, "linear", {BE_ENTRY(linear_forward), BE_ENTRY(linear_backward)}},
	{OP_CONV, "conv2d", {BE_ENTRY(conv2d_forward), BE_ENTRY(conv2d_backward),
			     BE_ENTRY(conv2d_work)}},
	{OP_BATCHNORM, "batchnorm", {BE_ENTRY(batchnorm_forward),
				     BE_ENTRY(batchnorm_backward)}},
	{OP_LAYERNORM, "layernorm", {BE_ENTRY(layernorm_forward),
				     BE_ENTRY(layernorm_backward)}},
	{OP_ACT, "activation", {BE_ENTRY(activation_forward),
				BE_ENTRY(activation_backward)}},
	{OP_MAXPOOL, "maxpool2d", {BE_ENTRY(maxpool2d_forward),
				   BE_ENTRY(maxpool2d_backward)}},
	{OP_AVGPOOL, "avgpool2d", {BE_ENTRY(avgpool2d_forward),
				   BE_ENTRY(avgpool2d_backward)}},
	{OP_GAP, "global_avgpool", {BE_ENTRY(global_avgpool_forward),
				    BE_ENTRY(global_avgpool_backward)}},
	{OP_DROPOUT, "dropout", {BE_ENTRY(dropout_forward),
				 BE_ENTRY(dropout_backward), BE_ENTRY(copy),
				 BE_ENTRY(accumulate)}},
	{OP_ADD, "add", {BE_ENTRY(add_forward), BE_ENTRY(accumulate)}},
	{OP_EMBEDDING, "embedding", {BE_ENTRY(embedding_forward),
				     BE_ENTRY(embedding_backward)}},
	{OP_INTERACTION, "interaction", {BE_ENTRY(interaction_forward),
					 BE_ENTRY(interaction_backward)}},
	{OP_POSITION, "position", {BE_ENTRY(add_forward), BE_ENTRY(copy),
				   BE_ENTRY(axpy), BE_ENTRY(accumulate)}},
	{OP_ATTENTION, "attention", {BE_ENTRY(attention_forward),
				     BE_ENTRY(attention_backward)}},
	{OP_GLU, "glu", {BE_ENTRY(glu_forward), BE_ENTRY(glu_backward)}},
	{OP_UPCONV, "upconv2x2", {BE_ENTRY(upconv2x2_forward),
				  BE_ENTRY(upconv2x2_backward)}},
	{OP_CONCAT, "concat", {BE_ENTRY(concat_forward),
			       BE_ENTRY(concat_backward)}},
	{OP_INSTNORM, "instnorm", {BE_ENTRY(instnorm_forward),
				   BE_ENTRY(instnorm_backward)}},
};

/* 0, or the error naming the first layer whose entry the backend lacks. */
static int check_backend(const apf_net *net)
{
	const char *be = (const char *)net->be;
	for (size_t i = 0; i < net->nops; i++) {
		const struct op_needs *need = NULL;
		for (size_t k = 0; k < sizeof op_needs / sizeof *op_needs; k++)
			if (op_needs[k].type == net->ops[i].type)
				need = &op_needs[k];
		if (!need)
			return apf_error(APF_EINTERNAL, "net",
					 "layer type %d has no backend needs",
					 net->ops[i].type);
		for (int e = 0; e < OP_MAX_ENTRIES && need->entry[e].name; e++) {
			void (*fn)(void);
			memcpy(&fn, be + need->entry[e].off, sizeof fn);
			if (!fn)
				return apf_error(APF_EINPUT, "net",
						 "%s: backend %s has no %s",
						 need->layer, net->be->name,
						 need->entry[e].name);
		}
	}
	return 0;
}

int apf_net_finish(apf_net *net, int out)
{
	int rc = check_in(net, out);
	if (rc)
		return rc;
	rc = check_backend(net);
	if (rc)
		return rc;
	if (out == 0)
		return apf_error(APF_EINPUT, "net",
				 "the output must be a layer's output");
	int *written = apf_calloc(net->nt, sizeof *written);
	if (!written)
		return apf_error(APF_ENOMEM, "net", "out of memory");
	written[out] = 1;
	for (size_t i = net->nops; i-- > 0;) {
		struct op *o = &net->ops[i];
		for (int k = 0; k < o->nin; k++) {
			o->accum[k] = written[o->in[k]];
			written[o->in[k]] = 1;
		}
	}
	/* Every tensor must reach the output, or its gradient would be read
	 * unwritten. */
	for (size_t t = 1; t < net->nt; t++)
		if (!written[t]) {
			free(written);
			return apf_error(APF_EINPUT, "net",
					 "tensor %zu does not reach the output",
					 t);
		}
	free(written);
	net->out = out;
	net->finished = 1;
	return fuse_chains(net);
}

/* ---- layout --------------------------------------------------------------- */

void apf_net_tensor_shape(const apf_net *net, int t, int *H, int *W, int *C)
{
	*H = net->t[t].H, *W = net->t[t].W, *C = net->t[t].C;
}

size_t apf_net_nparams(const apf_net *net)
{
	return net->nparams;
}

const apf_param *apf_net_param(const apf_net *net, size_t i)
{
	return i < net->nparams ? &net->params[i] : NULL;
}

size_t apf_net_param_floats(const apf_net *net)
{
	return net->param_floats;
}

size_t apf_net_nstate(const apf_net *net)
{
	return net->nstate;
}

const apf_state_entry *apf_net_state(const apf_net *net, size_t i)
{
	return i < net->nstate ? &net->state[i] : NULL;
}

size_t apf_net_state_floats(const apf_net *net)
{
	return net->state_floats;
}

int apf_net_out_features(const apf_net *net)
{
	return net->out >= 0 ? net->t[net->out].C : 0;
}

int apf_net_output(const apf_net *net)
{
	return net->out;
}

int apf_net_out_positions(const apf_net *net)
{
	return net->out >= 0 ? net->t[net->out].W : 0;
}

double apf_net_forward_macs(const apf_net *net)
{
	double macs = 0;
	for (size_t i = 0; i < net->nops; i++) {
		const struct op *o = &net->ops[i];
		const struct tensor *x = &net->t[o->in[0]], *y = &net->t[o->out];
		if (o->type == OP_LINEAR)
			macs += (double)tensor_numel(x) * y->C;
		else if (o->type == OP_CONV)
			macs += (double)y->H * y->W * y->C * o->K * o->K * x->C;
		else if (o->type == OP_UPCONV)
			macs += (double)tensor_numel(y) * x->C;
		else if (o->type == OP_ATTENTION) /* q k^T and att v, causal */
			macs += (double)y->W * (y->W + 1) * y->C;
	}
	return macs;
}

double apf_net_example_bytes(const apf_net *net)
{
	/* Tensor 0 is the input: read once. Every other stored tensor is
	 * written forward and read backward, and so is its gradient; a fused
	 * tensor lives in registers. Attention keeps its probabilities. */
	double floats = net->nt ? (double)tensor_numel(&net->t[0]) : 0;
	for (size_t i = 1; i < net->nt; i++)
		if (!net->t[i].fused)
			floats += 4.0 * (double)tensor_numel(&net->t[i]);
	for (size_t i = 0; i < net->nops; i++) {
		const struct op *o = &net->ops[i];
		if (o->type == OP_ATTENTION)
			floats += 2.0 * o->heads * (double)net->t[o->out].W *
				  net->t[o->out].W;
	}
	return floats * sizeof(float);
}

void apf_net_bind(apf_net *net, float *params, float *state)
{
	net->bound_params = params;
	net->bound_state = state;
}

int apf_net_init(apf_net *net, const apf_rng_key *key, const char *init)
{
	if (!net->finished)
		return apf_error(APF_EINTERNAL, "net", "init before finish");
	if (!net->bound_params || (net->state_floats && !net->bound_state))
		return apf_error(APF_EINTERNAL, "net", "init before bind");
	enum { KAIMING_UNIFORM, HE_NORMAL, LECUN_NORMAL } scheme;
	if (!init || !strcmp(init, "kaiming_uniform"))
		scheme = KAIMING_UNIFORM;
	else if (!strcmp(init, "he_normal"))
		scheme = HE_NORMAL;
	else if (!strcmp(init, "lecun_normal"))
		scheme = LECUN_NORMAL;
	else
		return apf_error(APF_EINPUT, init,
				 "unknown init (kaiming_uniform, he_normal, "
				 "lecun_normal)");
	/* Drawn on the host in parameter order and uploaded, so every backend
	 * starts from the same bits. */
	size_t np = net->param_floats, ns = net->state_floats;
	float *host = apf_calloc(np + ns, sizeof *host);
	if (!host)
		return apf_error(APF_ENOMEM, "net init", "out of memory");
	apf_rng r;
	apf_rng_init(&r, key, 0);
	for (size_t i = 0; i < net->nparams; i++) {
		const apf_param *p = &net->params[i];
		float *w = host + p->offset;
		if (p->kind == APF_PARAM_NORM_SCALE) {
			for (size_t j = 0; j < p->numel; j++)
				w[j] = 1.0f;
			continue;
		}
		if (p->kind == APF_PARAM_EMBEDDING) {
			for (size_t j = 0; j < p->numel; j++)
				w[j] = (2.0f * apf_rng_uniform(&r) - 1.0f) *
				       p->init_bound;
			continue;
		}
		if (p->kind != APF_PARAM_WEIGHT &&
		    p->kind != APF_PARAM_CONV_WEIGHT)
			continue; /* biases stay 0 */
		double fan = p->fan_in > 0 ? p->fan_in : 1;
		for (size_t j = 0; j < p->numel; j++) {
			if (scheme == KAIMING_UNIFORM) {
				/* PyTorch's default: kaiming_uniform(a=sqrt 5)
				 * gives bound 1/sqrt(fan_in). */
				float b = (float)(1.0 / sqrt(fan));
				w[j] = (2.0f * apf_rng_uniform(&r) - 1.0f) * b;
			} else {
				double g = scheme == HE_NORMAL ? 2.0 : 1.0;
				w[j] = (float)(sqrt(g / fan) *
					       apf_rng_normal(&r));
			}
		}
	}
	float *st = host + np;
	for (size_t i = 0; i < net->nops; i++) {
		const struct op *o = &net->ops[i];
		if (o->type != OP_BATCHNORM)
			continue;
		const apf_state_entry *var = &net->state[o->state[1]];
		for (size_t j = 0; j < var->numel; j++)
			st[var->offset + j] = 1.0f;
	}
	net->be->upload(net->be, net->bound_params, host, np * sizeof *host);
	if (ns)
		net->be->upload(net->be, net->bound_state, st, ns * sizeof *st);
	free(host);
	return net->be->sync(net->be);
}

/* ---- running -------------------------------------------------------------- */

static int alloc_floats(apf_backend *be, float **p, size_t n)
{
	return be->alloc(be, n * sizeof **p, (void **)p);
}

int apf_net_reserve(apf_net *net, int max_batch, int with_grads)
{
	if (!net->finished)
		return apf_error(APF_EINTERNAL, "net", "reserve before finish");
	if (max_batch <= net->max_batch && (!with_grads || net->with_grads))
		return 0;
	if (max_batch < net->max_batch)
		max_batch = net->max_batch;
	with_grads |= net->with_grads;
	free_buffers(net);
	apf_backend *be = net->be;
	size_t B = (size_t)max_batch;
	int rc = 0;
	for (size_t i = 1; !rc && i < net->nt; i++) {
		size_t n = B * tensor_numel(&net->t[i]);
		if (net->t[i].fused)
			continue;
		rc = alloc_floats(be, &net->t[i].data, n);
		if (!rc && with_grads)
			rc = alloc_floats(be, &net->t[i].grad, n);
	}
	size_t work = 0;
	for (size_t i = 0; !rc && i < net->nops; i++) {
		struct op *o = &net->ops[i];
		const struct tensor *x = &net->t[o->in[0]], *y = &net->t[o->out];
		size_t rows = B * x->H * x->W;
		if (o->type == OP_LAYERNORM || o->type == OP_INSTNORM) {
			/* per row, or per (image, channel) */
			size_t n = o->type == OP_LAYERNORM ? rows : B * x->C;
			rc = alloc_floats(be, &o->save_a, n);
			if (!rc)
				rc = alloc_floats(be, &o->save_b, n);
		} else if (o->type == OP_ATTENTION) {
			rc = alloc_floats(be, &o->att,
					  B * o->heads * (size_t)y->W * y->W);
		} else if (o->type == OP_MAXPOOL) {
			rc = be->alloc(be, B * tensor_numel(y) * sizeof(int32_t),
				       (void **)&o->argmax);
		} else if (o->type == OP_CONV) {
			size_t w = be->conv2d_work(be, max_batch, x->H, x->W,
						   x->C, y->C, o->K, o->S,
						   o->P);
			work = w > work ? w : work;
		}
	}
	if (!rc && work)
		rc = alloc_floats(be, &net->work, work);
	if (rc) {
		free_buffers(net);
		return rc;
	}
	net->work_floats = work;
	net->max_batch = max_batch;
	net->with_grads = with_grads;
	return 0;
}

static const float *param_ptr(const apf_net *net, int p)
{
	return p < 0 ? NULL : net->bound_params + net->params[p].offset;
}

static float *state_ptr(const apf_net *net, int s)
{
	return net->bound_state + net->state[s].offset;
}

/* Each dropout layer draws from its own key, derived from the step's key and
 * the layer's index, so two layers never share a mask. */
static void dropout_key(const uint32_t key[2], int index, uint32_t out[2])
{
	uint32_t ctr[4] = {(uint32_t)index, 0, 0, 0xd0u}, w[4];
	apf_philox4x32_10(ctr, key, w);
	out[0] = w[0], out[1] = w[1];
}

/* A fused chain (tail: its ReLU op o, its norm n): relu(bn(x) [+ res]) or
 * relu(instnorm(x)). */
static void fused_forward(apf_net *net, const struct op *o, int B, int train)
{
	const struct op *n = &net->ops[o->fnorm];
	const struct tensor *x = &net->t[n->in[0]];
	if (n->type == OP_INSTNORM) {
		net->be->instnorm_relu_forward(
			net->be, net->t[o->out].data, n->save_a, n->save_b,
			x->data, param_ptr(net, n->param[0]),
			param_ptr(net, n->param[1]), B, x->H * x->W, x->C,
			n->eps);
		return;
	}
	net->be->batchnorm_relu_forward(
		net->be, net->t[o->out].data, n->save_a, n->save_b, x->data,
		o->fres >= 0 ? net->t[o->fres].data : NULL,
		param_ptr(net, n->param[0]), param_ptr(net, n->param[1]),
		state_ptr(net, n->state[0]), state_ptr(net, n->state[1]),
		B * x->H * x->W, x->C, n->momentum, n->eps, train);
}

static void fused_backward(apf_net *net, const struct op *o, float *grads,
			   int B)
{
	const struct op *n = &net->ops[o->fnorm];
	const struct tensor *x = &net->t[n->in[0]];
	if (n->type == OP_INSTNORM) {
		net->be->instnorm_relu_backward(
			net->be, n->in[0] == 0 ? NULL : x->grad,
			grads + net->params[n->param[0]].offset,
			grads + net->params[n->param[1]].offset,
			net->t[o->out].grad, net->t[o->out].data, x->data,
			param_ptr(net, n->param[0]), n->save_a, n->save_b, B,
			x->H * x->W, x->C, n->accum[0]);
		return;
	}
	float *dres = o->fres > 0 ? net->t[o->fres].grad : NULL;
	net->be->batchnorm_relu_backward(
		net->be, n->in[0] == 0 ? NULL : x->grad, dres,
		grads + net->params[n->param[0]].offset,
		grads + net->params[n->param[1]].offset, net->t[o->out].grad,
		net->t[o->out].data, x->data, param_ptr(net, n->param[0]),
		n->save_a, n->save_b, B * x->H * x->W, x->C, n->accum[0],
		o->fres_accum);
}

int apf_net_forward(apf_net *net, const float **logits, const float *x,
		    int B, int train, const uint32_t dkey[2], uint64_t dstep)
{
	return apf_net_forward_idx(net, logits, x, NULL, NULL, B, train, dkey,
				   dstep);
}

/* Every index an embedding reads lies in its field. */
static int check_indices(const apf_net *net, const int32_t *idx, int B)
{
	for (size_t i = 0; i < net->nops; i++) {
		const struct op *o = &net->ops[i];
		if (o->type != OP_EMBEDDING)
			continue;
		for (int b = 0; b < B; b++)
			for (int f = 0; f < o->nfields; f++) {
				int32_t v = idx[(size_t)b * net->nidx +
						o->first + f];
				if (v < 0 || v >= o->rows[f])
					return apf_error(
						APF_EINPUT, "net",
						"index %d of example %d is "
						"%ld, outside its field's %d "
						"rows",
						o->first + f, b, (long)v,
						o->rows[f]);
			}
	}
	return 0;
}

int apf_net_forward_idx(apf_net *net, const float **logits, const float *x,
			const int32_t *idx, const int32_t *host_idx, int B,
			int train, const uint32_t dkey[2], uint64_t dstep)
{
	*logits = NULL;
	if (net->nidx && (!idx || !host_idx))
		return apf_error(APF_EINTERNAL, "net",
				 "forward without the net's index inputs");
	if (net->nidx) {
		int rc = check_indices(net, host_idx, B);
		if (rc)
			return rc;
	}
	net->idx = idx;
	net->host_idx = host_idx;
	if (!net->bound_params)
		return apf_error(APF_EINTERNAL, "net", "forward before bind");
	if (B <= 0)
		return apf_error(APF_EINPUT, "net", "batch size %d", B);
	int rc = apf_net_reserve(net, B, train);
	if (rc)
		return rc;
	apf_backend *be = net->be;
	net->t[0].data = (float *)x;
	static const uint32_t zero_key[2];
	if (!dkey)
		dkey = zero_key;
	for (size_t i = 0; i < net->nops; i++) {
		struct op *o = &net->ops[i];
		struct tensor *in = &net->t[o->in[0]], *out = &net->t[o->out];
		size_t n = (size_t)B * tensor_numel(out);
		int rows = B * in->H * in->W;
		if (o->fused_into >= 0)
			continue; /* runs at its chain's ReLU */
		if (o->fnorm >= 0) {
			fused_forward(net, o, B, train);
			continue;
		}
		switch (o->type) {
		case OP_LINEAR:
			be->linear_forward(be, out->data, in->data,
					   param_ptr(net, o->param[0]),
					   param_ptr(net, o->param[1]),
					   o->tokenwise ? rows : B,
					   o->tokenwise ? in->C
							: (int)tensor_numel(in),
					   out->C);
			break;
		case OP_POSITION: {
			size_t per = tensor_numel(in);
			for (int b = 0; b < B; b++)
				be->add_forward(be, out->data + b * per,
						in->data + b * per,
						param_ptr(net, o->param[0]), per);
			break;
		}
		case OP_ATTENTION:
			be->attention_forward(be, out->data, o->att, in->data, B,
					      in->W, out->C, o->heads, o->scale);
			break;
		case OP_GLU:
			be->glu_forward(be, o->act, out->data, in->data, rows,
					out->C);
			break;
		case OP_UPCONV:
			be->upconv2x2_forward(be, out->data, in->data,
					      param_ptr(net, o->param[0]),
					      param_ptr(net, o->param[1]), B,
					      in->H, in->W, in->C, out->C);
			break;
		case OP_CONCAT:
			be->concat_forward(be, out->data, in->data,
					   net->t[o->in[1]].data, rows, in->C,
					   net->t[o->in[1]].C);
			break;
		case OP_INSTNORM:
			be->instnorm_forward(be, out->data, o->save_a, o->save_b,
					     in->data,
					     param_ptr(net, o->param[0]),
					     param_ptr(net, o->param[1]), B,
					     in->H * in->W, in->C, o->eps);
			break;
		case OP_CONV:
			be->conv2d_forward(be, out->data, in->data,
					   param_ptr(net, o->param[0]),
					   param_ptr(net, o->param[1]), B,
					   in->H, in->W, in->C, out->C, o->K,
					   o->S, o->P, net->work);
			break;
		case OP_BATCHNORM:
			be->batchnorm_forward(be, out->data, o->save_a,
					      o->save_b, in->data,
					      param_ptr(net, o->param[0]),
					      param_ptr(net, o->param[1]),
					      state_ptr(net, o->state[0]),
					      state_ptr(net, o->state[1]), rows,
					      in->C, o->momentum, o->eps, train);
			break;
		case OP_LAYERNORM:
			be->layernorm_forward(be, out->data, o->save_a,
					      o->save_b, in->data,
					      param_ptr(net, o->param[0]),
					      param_ptr(net, o->param[1]), rows,
					      in->C, o->eps);
			break;
		case OP_ACT:
			be->activation_forward(be, o->act, out->data, in->data,
					       n);
			break;
		case OP_MAXPOOL:
			be->maxpool2d_forward(be, out->data, o->argmax,
					      in->data, B, in->H, in->W, in->C,
					      o->K, o->S, o->P);
			break;
		case OP_AVGPOOL:
			be->avgpool2d_forward(be, out->data, in->data, B, in->H,
					      in->W, in->C, o->K, o->S, o->P);
			break;
		case OP_GAP:
			be->global_avgpool_forward(be, out->data, in->data, B,
						   in->H * in->W, in->C);
			break;
		case OP_DROPOUT:
			if (train && o->p > 0.0f) {
				uint32_t k[2];
				dropout_key(dkey, o->dropout_index, k);
				be->dropout_forward(be, out->data, in->data, n,
						    o->p, k, dstep);
			} else {
				be->copy(be, out->data, in->data, n);
			}
			break;
		case OP_ADD:
			be->add_forward(be, out->data, in->data,
					net->t[o->in[1]].data, n);
			break;
		case OP_EMBEDDING:
			be->embedding_forward(be, out->data, net->idx + o->first,
					      net->nidx, o->offset,
					      param_ptr(net, o->param[0]), B,
					      o->nfields, out->C);
			break;
		case OP_INTERACTION:
			be->interaction_forward(be, out->data, in->data,
						net->t[o->in[1]].data, B,
						net->t[o->in[1]].W, in->C * in->H * in->W);
			break;
		}
	}
	net->last_B = B;
	net->last_train = train;
	net->last_key[0] = dkey[0], net->last_key[1] = dkey[1];
	net->last_step = dstep;
	*logits = net->t[net->out].data;
	return 0;
}

int apf_net_backward(apf_net *net, float *grads, const float *dlogits)
{
	if (!net->last_train || !net->with_grads)
		return apf_error(APF_EINTERNAL, "net",
				 "backward without a training forward");
	apf_backend *be = net->be;
	int B = net->last_B;
	struct tensor *tout = &net->t[net->out];
	be->copy(be, tout->grad, dlogits, (size_t)B * tensor_numel(tout));
	for (size_t i = net->nops; i-- > 0;) {
		struct op *o = &net->ops[i];
		struct tensor *in = &net->t[o->in[0]], *out = &net->t[o->out];
		/* The network input needs no gradient. */
		float *din = o->in[0] == 0 ? NULL : in->grad;
		const float *dout = out->grad;
		size_t n = (size_t)B * tensor_numel(out);
		int rows = B * in->H * in->W;
		float *gw = o->param[0] >= 0
				    ? grads + net->params[o->param[0]].offset
				    : NULL;
		float *gb = o->param[1] >= 0
				    ? grads + net->params[o->param[1]].offset
				    : NULL;
		int acc = o->accum[0];
		if (o->fused_into >= 0)
			continue; /* done at its chain's ReLU */
		if (o->fnorm >= 0) {
			fused_backward(net, o, grads, B);
			continue;
		}
		switch (o->type) {
		case OP_LINEAR:
			be->linear_backward(be, din, gw, gb, dout, in->data,
					    param_ptr(net, o->param[0]),
					    o->tokenwise ? rows : B,
					    o->tokenwise ? in->C
							 : (int)tensor_numel(in),
					    out->C, acc);
			break;
		case OP_POSITION: {
			/* dpos = the sum of the examples' gradients, in
			 * example order */
			size_t per = tensor_numel(in);
			be->copy(be, gw, dout, per);
			for (int b = 1; b < B; b++)
				be->axpy(be, gw, 1.0f, dout + b * per, per);
			if (din)
				be->accumulate(be, din, dout, n, acc);
			break;
		}
		case OP_ATTENTION:
			if (din)
				be->attention_backward(be, din, dout, in->data,
						       o->att, B, in->W, out->C,
						       o->heads, o->scale, acc);
			break;
		case OP_GLU:
			if (din)
				be->glu_backward(be, o->act, din, dout, in->data,
						 rows, out->C, acc);
			break;
		case OP_UPCONV:
			be->upconv2x2_backward(be, din, gw, gb, dout, in->data,
					       param_ptr(net, o->param[0]), B,
					       in->H, in->W, in->C, out->C, acc);
			break;
		case OP_CONCAT: {
			struct tensor *b2 = &net->t[o->in[1]];
			be->concat_backward(be, din,
					    o->in[1] == 0 ? NULL : b2->grad, dout,
					    rows, in->C, b2->C, acc,
					    o->accum[1]);
			break;
		}
		case OP_INSTNORM:
			be->instnorm_backward(be, din, gw, gb, dout, in->data,
					      param_ptr(net, o->param[0]),
					      o->save_a, o->save_b, B,
					      in->H * in->W, in->C, acc);
			break;
		case OP_CONV:
			be->conv2d_backward(be, din, gw, gb, dout, in->data,
					    param_ptr(net, o->param[0]), B,
					    in->H, in->W, in->C, out->C, o->K,
					    o->S, o->P, net->work, acc);
			break;
		case OP_BATCHNORM:
			be->batchnorm_backward(be, din, gw, gb, dout, in->data,
					       param_ptr(net, o->param[0]),
					       o->save_a, o->save_b, rows,
					       in->C, acc);
			break;
		case OP_LAYERNORM:
			be->layernorm_backward(be, din, gw, gb, dout, in->data,
					       param_ptr(net, o->param[0]),
					       o->save_a, o->save_b, rows,
					       in->C, acc);
			break;
		case OP_ACT:
			if (din)
				be->activation_backward(be, o->act, din, dout,
							in->data, out->data, n,
							acc);
			break;
		case OP_MAXPOOL:
			if (din)
				be->maxpool2d_backward(be, din, dout, o->argmax,
						       B, in->H, in->W, in->C,
						       o->K, o->S, o->P, acc);
			break;
		case OP_AVGPOOL:
			if (din)
				be->avgpool2d_backward(be, din, dout, B, in->H,
						       in->W, in->C, o->K, o->S,
						       o->P, acc);
			break;
		case OP_GAP:
			if (din)
				be->global_avgpool_backward(be, din, dout, B,
							    in->H * in->W,
							    in->C, acc);
			break;
		case OP_DROPOUT:
			if (!din)
				break;
			if (o->p > 0.0f) {
				uint32_t k[2];
				dropout_key(net->last_key, o->dropout_index, k);
				be->dropout_backward(be, din, dout, n, o->p, k,
						     net->last_step, acc);
			} else {
				be->accumulate(be, din, dout, n, acc);
			}
			break;
		case OP_ADD:
			for (int k = 0; k < 2; k++)
				if (o->in[k] != 0)
					be->accumulate(be,
						       net->t[o->in[k]].grad,
						       dout, n, o->accum[k]);
			break;
		case OP_EMBEDDING:
			be->embedding_backward(be, gw, dout, net->idx + o->first,
					       net->nidx, o->offset, B,
					       o->nfields, o->V, out->C);
			break;
		case OP_INTERACTION: {
			struct tensor *e = &net->t[o->in[1]];
			be->interaction_backward(
				be, din, o->in[1] == 0 ? NULL : e->grad, dout,
				in->data, e->data, B, e->W,
				in->C * in->H * in->W, acc, o->accum[1]);
			break;
		}
		}
	}
	return be->sync(be);
}
