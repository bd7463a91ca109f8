#!/usr/bin/python3
"""Fails when a function that leaves the vector registers' upper halves
dirty calls SSE code.

After an instruction writes a ymm or zmm register, the upper halves stay
dirty until VZEROUPPER. SSE (legacy-encoded) instructions executed in that
state pay for a merge on every instruction: on the Xeon VMs apf is measured
on, the scalar GEMM ran at 129 ns a multiply-add after an AVX-512 GEMM that
left them dirty, against 1.8 ns after a clean one. GCC puts VZEROUPPER
before a function's returns, but not before every call to a function of
its own unit that it compiled as SSE code (gemm.c's store_tile, reached from
the tile kernels' edge tiles), and the dirty state then outlives the call:
everything after the GEMM in that thread, a submission's own C code
included, ran slow until some library call happened to clear it.

    scripts/vector-state.py FILE...   (executables, objects or archives)

For each function that uses a ymm or zmm register, each direct call (or
tail jump) to a function defined in FILE whose code is SSE (a legacy
instruction on an xmm register) is checked: walking back from the call
through the function's preceding instructions, a VZEROUPPER (or VZEROALL)
must come before any instruction that names a ymm or zmm register. The
walk is linear, so a vector instruction on another path before the call
counts too (a false alarm, never a miss on a straight path). Calls into
shared libraries (through the PLT) are not judged: GCC clears the state
before those itself.

Exit 0 with a one-line summary; exit 1 naming each call
(function: instruction); exit 2 when objdump cannot read a file.
"""
import re
import subprocess
import sys

FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")
CALL = re.compile(r"^(call|jmp)\s+[0-9a-f]+ <([^>+]+)(\+0x[0-9a-f]+)?>$")
WIDE = re.compile(r"%[yz]mm\d")
SSE = re.compile(r"^[a-uw-z][a-z0-9]*\s.*%xmm\d")  # not v-prefixed (VEX/EVEX)


def functions(path):
    """{name: [instruction text, ...]} of every function in path."""
    p = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise OSError(f"{path}: objdump: {p.stderr.strip() or 'failed'}")
    out, cur = {}, None
    for line in p.stdout.splitlines():
        m = FUNC.match(line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        parts = line.split("\t")
        if cur is not None and len(parts) >= 2 and parts[-1].strip():
            cur.append(parts[-1].strip())
    return out


def offenders(funcs):
    """[(caller, instruction)] of the calls to SSE code made dirty."""
    wide = {f for f, ins in funcs.items() if any(WIDE.search(i) for i in ins)}
    sse = {f for f, ins in funcs.items()
           if f not in wide and any(SSE.match(i) for i in ins)}
    found = []
    for f in sorted(wide):
        ins = funcs[f]
        for k, i in enumerate(ins):
            m = CALL.match(i)
            if not m or m.group(2) not in sse or m.group(2) == f:
                continue
            for j in range(k - 1, -1, -1):
                if ins[j].startswith(("vzeroupper", "vzeroall")):
                    break
                if WIDE.search(ins[j]):
                    found.append((f, i))
                    break
    return found


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        print("usage: vector-state.py FILE...", file=sys.stderr)
        return 2
    bad, calls = [], 0
    for path in argv[1:]:
        try:
            funcs = functions(path)
        except OSError as e:
            print(f"vector-state: {e}", file=sys.stderr)
            return 2
        calls += sum(1 for ins in funcs.values() for i in ins if CALL.match(i))
        bad += [(path, f, i) for f, i in offenders(funcs)]
    for path, f, i in bad:
        print(f"{path}: {f}: {i}: calls SSE code with the upper halves "
              f"dirty (no VZEROUPPER since the last ymm/zmm instruction)")
    if bad:
        return 1
    print(f"vector-state: {len(argv) - 1} file(s), {calls} direct calls: "
          f"no SSE code reached with the upper halves dirty")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
