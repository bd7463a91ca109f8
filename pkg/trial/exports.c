/*
 * exports.c: what a built submission exports, read from its ELF dynamic
 * symbol table with libelf, so that nothing of the submission runs to find
 * out (dlopen would run its constructors).
 */
#include "trial/trial.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <string.h>
#include <unistd.h>

#include "apf/submission.h"

struct want {
	const char *name;
	int required;
	int found, type;
	GElf_Sym sym;
};

/* The int at a symbol's address, from the section that holds it. */
static int read_int(Elf *elf, const GElf_Sym *s, int *out)
{
	Elf_Scn *scn = elf_getscn(elf, s->st_shndx);
	GElf_Shdr sh;
	if (!scn || !gelf_getshdr(scn, &sh) || s->st_size != sizeof(int))
		return -1;
	if (sh.sh_type == SHT_NOBITS) {
		*out = 0;
		return 0;
	}
	if (s->st_value < sh.sh_addr ||
	    s->st_value - sh.sh_addr + sizeof(int) > sh.sh_size)
		return -1;
	uint64_t off = s->st_value - sh.sh_addr;
	for (Elf_Data *d = elf_getdata(scn, NULL); d;
	     d = elf_getdata(scn, d)) {
		if (off < (uint64_t)d->d_off ||
		    off + sizeof(int) > (uint64_t)d->d_off + d->d_size ||
		    !d->d_buf)
			continue;
		memcpy(out, (const char *)d->d_buf + (off - (uint64_t)d->d_off),
		       sizeof(int));
		return 0;
	}
	return -1;
}

static int check_symbols(Elf *elf, const char *so_path)
{
	struct want w[] = {{"apf_abi_version", 1, 0, STT_OBJECT, {0}},
			   {"get_batch_size", 1, 0, STT_FUNC, {0}},
			   {"init_optimizer_state", 1, 0, STT_FUNC, {0}},
			   {"update_params", 1, 0, STT_FUNC, {0}},
			   {"prepare_for_eval", 0, 0, STT_FUNC, {0}},
			   {"data_selection", 0, 0, STT_FUNC, {0}}};
	const size_t nw = sizeof w / sizeof w[0];
	Elf_Scn *scn = NULL;
	int seen_dynsym = 0;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM)
			continue;
		seen_dynsym = 1;
		Elf_Data *d = elf_getdata(scn, NULL);
		size_t n = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
		for (size_t i = 0; d && i < n; i++) {
			GElf_Sym s;
			if (!gelf_getsym(d, (int)i, &s) ||
			    s.st_shndx == SHN_UNDEF ||
			    GELF_ST_BIND(s.st_info) == STB_LOCAL)
				continue;
			const char *name = elf_strptr(elf, sh.sh_link, s.st_name);
			for (size_t k = 0; name && k < nw; k++)
				if (!strcmp(name, w[k].name)) {
					w[k].found = 1;
					w[k].sym = s;
				}
		}
	}
	if (!seen_dynsym)
		return apf_error(APF_EINPUT, so_path,
				 "not a shared object (no dynamic symbols)");
	for (size_t k = 0; k < nw; k++) {
		int type = w[k].found ? GELF_ST_TYPE(w[k].sym.st_info) : 0;
		if (!w[k].found && w[k].required)
			return apf_error(APF_EINPUT, "submission",
					 "does not define %s (apf/submission.h "
					 "lists what a submission exports)",
					 w[k].name);
		if (w[k].found && type != w[k].type)
			return apf_error(APF_EINPUT, "submission",
					 w[k].type == STT_FUNC
						 ? "%s is not a function"
						 : "%s is a function, not a "
						   "variable",
					 w[k].name);
	}
	int abi;
	if (read_int(elf, &w[0].sym, &abi))
		return apf_error(APF_EINPUT, "submission",
				 "apf_abi_version is not an int (declare it "
				 "`const int apf_abi_version = "
				 "APF_ABI_VERSION;`)");
	if (abi < APF_ABI_MIN_VERSION || abi > APF_ABI_VERSION)
		return apf_error(APF_EINPUT, "submission",
				 "apf_abi_version is %d; this apf implements "
				 "ABI %d to %d",
				 abi, APF_ABI_MIN_VERSION, APF_ABI_VERSION);
	return 0;
}

int apf_submission_check_exports(const char *so_path)
{
	if (elf_version(EV_CURRENT) == EV_NONE)
		return apf_error(APF_EINTERNAL, "libelf", "%s", elf_errmsg(-1));
	int fd = open(so_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return apf_error_errno(APF_EINPUT, errno, so_path, "open");
	Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
	int rc;
	if (!elf || elf_kind(elf) != ELF_K_ELF)
		rc = apf_error(APF_EINPUT, so_path, "not an ELF file: %s",
			       elf_errmsg(-1));
	else
		rc = check_symbols(elf, so_path);
	if (elf)
		elf_end(elf);
	close(fd);
	return rc;
}
