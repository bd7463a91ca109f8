/*
 * arena.c: the arena's layout and the check every reader runs before
 * trusting a header (a checkpoint file or memory a trial could scribble on).
 */
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(struct apf_arena_header) <= APF_ARENA_HEADER,
	       "the arena header must fit its page");

#define ALIGN 64

static uint64_t align_up(uint64_t x)
{
	return (x + ALIGN - 1) / ALIGN * ALIGN;
}

size_t apf_arena_capacity(size_t params_floats, size_t state_floats,
			  unsigned slot_factor)
{
	uint64_t bytes = APF_ARENA_HEADER;
	bytes += align_up(params_floats * sizeof(float));
	bytes += align_up(state_floats * sizeof(float));
	/* Slots: slot_factor parameter-sized vectors, plus room for scalars
	 * and alignment of every slot. */
	bytes += (uint64_t)slot_factor * align_up(params_floats * sizeof(float));
	bytes += (uint64_t)APF_ARENA_MAX_SLOTS * ALIGN * 2;
	return (size_t)bytes;
}

int apf_arena_format(void *mem, size_t capacity, size_t params_floats,
		     size_t state_floats)
{
	struct apf_arena_header *h = mem;
	uint64_t p = APF_ARENA_HEADER;
	uint64_t s = align_up(p + params_floats * sizeof(float));
	uint64_t slots = align_up(s + state_floats * sizeof(float));
	if (slots > capacity)
		return apf_error(APF_EINTERNAL, "arena",
				 "%zu bytes cannot hold the model", capacity);
	memset(h, 0, APF_ARENA_HEADER);
	memcpy(h->magic, APF_ARENA_MAGIC, 8);
	h->version = 1;
	h->capacity = capacity;
	h->params_offset = p;
	h->params_floats = params_floats;
	h->state_offset = s;
	h->state_floats = state_floats;
	h->slots_offset = slots;
	h->used = slots;
	return 0;
}

static int bad(const char *why)
{
	return apf_error(APF_EVERIFY, "arena", "%s", why);
}

int apf_arena_check(const void *mem, size_t bytes)
{
	if (bytes < APF_ARENA_HEADER)
		return bad("shorter than its header");
	const struct apf_arena_header *h = mem;
	if (memcmp(h->magic, APF_ARENA_MAGIC, 8) || h->version != 1)
		return bad("not an apf arena (magic or version)");
	uint64_t size = bytes;
	/* A checkpoint holds `used` bytes; live memory has `capacity`. */
	if (h->used > h->capacity || h->used > size)
		return bad("used bytes beyond the block");
	if (h->params_offset != APF_ARENA_HEADER ||
	    h->params_floats > (h->used - h->params_offset) / sizeof(float))
		return bad("parameters outside the block");
	if (h->state_offset < h->params_offset + h->params_floats * sizeof(float) ||
	    h->state_offset > h->used ||
	    h->state_floats > (h->used - h->state_offset) / sizeof(float))
		return bad("model state outside the block");
	if (h->slots_offset < h->state_offset + h->state_floats * sizeof(float) ||
	    h->slots_offset > h->used)
		return bad("slots outside the block");
	if (h->nslots > APF_ARENA_MAX_SLOTS)
		return bad("too many slots");
	if (h->global_step < 0 || h->evals < 0)
		return bad("negative step or eval count");
	uint64_t end = h->slots_offset;
	for (uint32_t i = 0; i < h->nslots; i++) {
		const struct apf_arena_slot *s = &h->slots[i];
		if (memchr(s->name, 0, sizeof s->name) == NULL || !s->name[0])
			return bad("slot name not terminated");
		uint64_t item = s->kind == APF_SLOT_VECTOR   ? sizeof(float)
				: s->kind == APF_SLOT_SCALAR ? sizeof(double)
							     : 0;
		if (!item || (s->kind == APF_SLOT_SCALAR && s->n != 1))
			return bad("slot of unknown kind");
		if (s->offset < end || s->n > (h->used - s->offset) / item ||
		    s->offset > h->used)
			return bad("slot outside the block or overlapping");
		end = s->offset + s->n * item;
		for (uint32_t k = 0; k < i; k++)
			if (!strcmp(h->slots[k].name, s->name))
				return bad("slot named twice");
	}
	if (end > h->used)
		return bad("slots beyond the used bytes");
	return 0;
}

float *apf_arena_params(void *mem)
{
	struct apf_arena_header *h = mem;
	return (float *)((char *)mem + h->params_offset);
}

float *apf_arena_state(void *mem)
{
	struct apf_arena_header *h = mem;
	return (float *)((char *)mem + h->state_offset);
}

void apf_arena_diff(const void *got, const void *want, size_t n, char *why,
		    size_t size)
{
	const struct apf_arena_header *g = got, *w = want;
	const char *gb = got, *wb = want;
	why[0] = 0;
	if (!memcmp(got, want, n))
		return;
	if (memcmp(got, want, APF_ARENA_HEADER)) {
		if (g->global_step != w->global_step)
			snprintf(why, size, "header: global step %lld, the "
					    "checkpoint has %lld",
				 (long long)g->global_step,
				 (long long)w->global_step);
		else if (g->data_epoch != w->data_epoch ||
			 g->data_index != w->data_index)
			snprintf(why, size, "header: the data position differs");
		else
			snprintf(why, size, "header: differs (slots or sizes)");
		return;
	}
	struct part {
		const char *name;
		uint64_t off, bytes;
	} parts[2 + APF_ARENA_MAX_SLOTS];
	size_t np = 0;
	parts[np++] = (struct part){"parameters", w->params_offset,
				    w->params_floats * sizeof(float)};
	parts[np++] = (struct part){"model state", w->state_offset,
				    w->state_floats * sizeof(float)};
	for (uint32_t i = 0; i < w->nslots && i < APF_ARENA_MAX_SLOTS; i++)
		parts[np++] = (struct part){
			w->slots[i].name, w->slots[i].offset,
			w->slots[i].n * (w->slots[i].kind == APF_SLOT_SCALAR
						 ? sizeof(double)
						 : sizeof(float))};
	for (size_t p = 0; p < np; p++) {
		if (parts[p].off + parts[p].bytes > n ||
		    !memcmp(gb + parts[p].off, wb + parts[p].off, parts[p].bytes))
			continue;
		size_t k = 0;
		while (k < parts[p].bytes &&
		       gb[parts[p].off + k] == wb[parts[p].off + k])
			k++;
		snprintf(why, size, "%s%s differ%s from byte %zu on",
			 p >= 2 ? "slot " : "", parts[p].name,
			 p >= 2 ? "s" : "", k);
		return;
	}
	snprintf(why, size, "padding between sections differs");
}

void apf_arena_initial_differs(const void *arena, size_t bytes,
			       const float *init, size_t param_floats,
			       size_t state_floats, char *why, size_t size)
{
	const struct apf_arena_header *h = arena;
	why[0] = 0;
	if (apf_arena_check(arena, bytes))
		snprintf(why, size, "the arena is damaged: %s",
			 apf_error_message());
	else if (h->params_floats != param_floats ||
		 h->state_floats != state_floats)
		snprintf(why, size, "the arena is laid out for another model");
	else if (!h->initialized || h->global_step != 0 || h->evals != 0)
		snprintf(why, size, "the arena is not at step 0 after "
				    "init_optimizer_state");
	else if (h->data_epoch != 0 || h->data_index != 0)
		snprintf(why, size, "the data stream moved before the clock "
				    "started (epoch %llu, example %llu)",
			 (unsigned long long)h->data_epoch,
			 (unsigned long long)h->data_index);
	if (why[0])
		return;
	const char *base = arena;
	const char *got[2] = {base + h->params_offset, base + h->state_offset};
	const float *want[2] = {init, init + param_floats};
	size_t n[2] = {param_floats, state_floats};
	static const char *const what[2] = {"parameters", "model state"};
	for (int k = 0; k < 2; k++) {
		if (!memcmp(got[k], want[k], n[k] * sizeof(float)))
			continue;
		size_t i = 0;
		while (memcmp(got[k] + i * sizeof(float), want[k] + i,
			      sizeof(float)) == 0)
			i++;
		snprintf(why, size,
			 "after init_optimizer_state the %s differ from the "
			 "workload's initialisation (from value %zu on)",
			 what[k], i);
		return;
	}
}
