/*
 * arena.c: the arena's layout and the check every reader runs before
 * trusting a header (a checkpoint file or memory a trial could scribble on).
 */
#include "trial/trial.h"

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
