/*
 * cuda_plugin.h: the contract between libapf's loader (cuda_loader.c) and
 * the CUDA plugin (the .cu files of pkg/nn/cuda, built into
 * build/lib/apf-cuda.so).
 *
 * libapf never links CUDA: the loader dlopens the plugin and resolves one
 * symbol, APF_CUDA_PLUGIN_SYMBOL, of type apf_cuda_plugin_new_fn. The plugin
 * links cudart and cuBLAS but not libapf, so it cannot record apf errors
 * itself: it returns codes and writes messages into buffers, and the loader
 * turns them into apf_error lines. For that, be->impl of a plugin backend
 * starts with a struct apf_cuda_head: the loader keeps the plugin's own
 * alloc and sync there and puts wrappers in the table that report the
 * message the plugin left in head->err.
 */
#ifndef APF_NN_CUDA_PLUGIN_H
#define APF_NN_CUDA_PLUGIN_H

#include <stddef.h>

#include "nn/nn.h"

#define APF_CUDA_PLUGIN_SYMBOL "apf_cuda_plugin_new"
#define APF_CUDA_PLUGIN_ABI 2

/* apf_cuda_plugin_new's results besides 0. */
enum {
	APF_CUDA_NO_DEVICE = 1, /* err: cudaGetErrorString of the device count's result */
	APF_CUDA_FAILED = 2,    /* err: what failed and why */
};

struct apf_cuda_head {
	int abi;            /* APF_CUDA_PLUGIN_ABI */
	size_t table_bytes; /* sizeof(apf_backend) as the plugin was built */
	char what[256];     /* "NVIDIA H200, compute 9.0, driver 13.0, ..." */
	char err[256];      /* the message of the last nonzero alloc or sync */
	/* The plugin's own alloc and sync: 0, or nonzero with err written
	 * (alloc: out of device memory; sync: the first error since the last
	 * sync, which the plugin then forgets). */
	int (*alloc)(apf_backend *be, size_t nbytes, void **out);
	int (*sync)(apf_backend *be);
};

/* Creates the backend on device 0 (*out, be->impl a struct apf_cuda_head
 * first; be->destroy frees it), or returns APF_CUDA_NO_DEVICE or
 * APF_CUDA_FAILED with the reason in err. */
typedef int (*apf_cuda_plugin_new_fn)(apf_backend **out, char *err,
				      size_t errlen);

#endif
