/*
 * torchcheck.c: the PyTorch cross-checks' shared pieces (torchcheck.h).
 */
#include "testlib.h"
#include "torchcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

json_t *torchcheck_params(const apf_net *net)
{
	json_t *jp = json_array();
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		json_t *shape = json_array();
		for (int k = 0; k < p->ndim; k++)
			json_array_append_new(shape, json_integer(p->shape[k]));
		json_array_append_new(
			jp, json_pack("{s:s, s:o, s:I, s:I}", "name", p->name,
				      "shape", shape, "offset",
				      (json_int_t)p->offset, "numel",
				      (json_int_t)p->numel));
	}
	return jp;
}

double *torchcheck_run(const char *script, const char *dir, size_t np)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd, TESTLIB_PYTHON " %s/tests/unit/lib/%s %s",
		 testlib_root(), script, dir);
	assert_int_equal(system(cmd), 0);
	size_t len;
	double *t = (double *)testlib_read(dir, "torch.bin", &len);
	assert_int_equal(len, (1 + np) * sizeof(double));
	return t;
}

void torchcheck_compare(const char *what, const apf_net *net, double loss,
			const float *g, const double *t)
{
	printf("    %s: loss %.8f, PyTorch %.8f\n", what, loss, t[0]);
	if (fabs(loss - t[0]) > 1e-4 * fabs(t[0]))
		fail_msg("%s: loss %.8g, PyTorch %.8g", what, loss, t[0]);
	double worst = 0;
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		double scale = 0, err = 0;
		for (size_t j = 0; j < p->numel; j++) {
			double tv = t[1 + p->offset + j];
			scale = fabs(tv) > scale ? fabs(tv) : scale;
			double e = fabs(g[p->offset + j] - tv);
			err = e > err ? e : err;
		}
		if (!(scale > 0)) /* every parameter takes a gradient */
			fail_msg("%s: %s: PyTorch's gradient is 0", what,
				 p->name);
		if (err > 1e-4 * scale)
			fail_msg("%s: %s: gradient off by %.3g of its largest "
				 "%.3g",
				 what, p->name, err, scale);
		worst = err / scale > worst ? err / scale : worst;
	}
	printf("    %s: gradients within %.2g of PyTorch's, relative\n", what,
	       worst);
}
