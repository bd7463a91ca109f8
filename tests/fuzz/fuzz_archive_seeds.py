#!/usr/bin/python3
"""Seeds for fuzz_archive: small tar streams, written as apf writes them and
as other tars do, holding what the reader must accept and what it must
refuse (the fuzzer wraps each input in a zstd frame with a valid trailer).

    fuzz_archive_seeds.py CORPUS_DIR
"""
import io
import os
import sys
import tarfile


def tar(members, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, kind, arg in members:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if kind == "f":
                info.size = len(arg)
                info.mode = 0o644
                t.addfile(info, io.BytesIO(arg))
            else:
                info.type = {"l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE,
                             "d": tarfile.DIRTYPE, "p": tarfile.FIFOTYPE,
                             "c": tarfile.CHRTYPE}[kind]
                info.mode = 0o777 if kind == "l" else 0o755
                if kind in "lh":
                    info.linkname = arg
                t.addfile(info)
    return buf.getvalue()


SEEDS = {
    "plain": [("manifest.dsse.json", "f", b"{}"),
              ("submission/a.c", "f", b"int a;\n"),
              ("submission/link", "l", "a.c"),
              ("submission/sub/deep/x", "f", b"x" * 700)],
    "long": [("submission/" + "n" * 150, "f", b"long"),
             ("submission/t", "l", "t" * 120)],
    "utf8": [("submission/caf\u00e9.c", "f", b"x")],
    "chain": [("a", "l", "b/../x"), ("b", "l", ".")],
    "loop": [("a", "l", "b"), ("b", "l", "a")],
    "escape": [("evil", "l", "../x"), ("../y", "f", b"y")],
    "kinds": [("d", "d", None), ("h", "h", "d"), ("p", "p", None),
              ("c", "c", None)],
    "dup": [("m", "f", b"1"), ("a", "f", b"2"), ("a", "f", b"3")],
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, members in SEEDS.items():
        with open(os.path.join(out, name + ".tar"), "wb") as f:
            f.write(tar(members))
    with open(os.path.join(out, "gnu.tar"), "wb") as f:
        f.write(tar(SEEDS["long"], tarfile.GNU_FORMAT))
    with open(os.path.join(out, "ustar.tar"), "wb") as f:
        f.write(tar(SEEDS["plain"], tarfile.USTAR_FORMAT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
