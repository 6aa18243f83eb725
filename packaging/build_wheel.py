#!/usr/bin/env python3
# Copyright 2026 The GMLake Authors.
"""Builds the gmlake wheel: the Python package, libgmlake.so, gmlaked and
gmlakectl, with every shared library they need bundled.

GPU nodes have neither Bazel nor Debian's gRPC, protobuf and Abseil, so the
wheel carries them: gmlake/lib holds libgmlake.so and the libraries ldd
names (with $ORIGIN rpaths set by patchelf), gmlake/bin the two binaries
(rpath $ORIGIN/../lib). Left to the node are the C library family and the
compiler runtime (libc, libm, libstdc++, libgcc_s, ld-linux), which every
Linux has; the script checks that nothing needs a newer glibc than the
wheel's platform tag promises, nor a newer libstdc++ than MAX_GLIBCXX.
Then `python3 -m wheel pack` (Debian's python3-wheel) writes the RECORD and
the archive.

    build_wheel.py --out gmlake-V-py3-none-manylinux_2_36_x86_64.whl \\
        --package client/python/gmlake --lib bazel-bin/client/libgmlake.so \\
        --bin bazel-bin/daemon/gmlaked --bin bazel-bin/tools/gmlakectl
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Provided by the node, never bundled.
SYSTEM = re.compile(r"^(linux-vdso|ld-linux[^ ]*|libc|libm|libstdc\+\+|libgcc_s|"
                    r"libdl|libpthread|librt)\.so")
# Ubuntu 22.04's GCC 12 runtime has GLIBCXX_3.4.30: what Debian 12 builds
# need at most; a newer need would break on such nodes.
MAX_GLIBCXX = (3, 4, 30)

ENTRY_POINTS = """[console_scripts]
gmlake = gmlake._cli:gmlake
gmlaked = gmlake._cli:gmlaked
gmlakectl = gmlake._cli:gmlakectl
"""


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True,
                          env=dict(os.environ, LC_ALL="C")).stdout


def needed_libraries(path):
    """{soname: path} of what `path` loads (ldd), except the system's."""
    out = {}
    for line in run("ldd", path).splitlines():
        line = line.strip()
        if "not found" in line:
            raise SystemExit(f"build_wheel: {path} needs a library that is not "
                             f"installed: {line}")
        m = re.match(r"(\S+) => (/\S+)", line)
        if m and not SYSTEM.match(m.group(1)):
            out[m.group(1)] = m.group(2)
    return out


def version_needs(path):
    """{"GLIBC": (2, 34), "GLIBCXX": (3, 4, 30)}: the newest of each."""
    newest = {}
    for name, ver in re.findall(r"\b(GLIBC|GLIBCXX|CXXABI)_([0-9.]+)",
                                run("objdump", "-p", path)):
        v = tuple(int(x) for x in ver.split("."))
        newest[name] = max(newest.get(name, v), v)
    return newest


def check_resolves_inside(stage, files):
    """ldd of every file: each library from the stage, or the system's."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    for f in files:
        out = subprocess.run(["ldd", f], capture_output=True, text=True,
                             env=env, check=True).stdout
        for line in out.splitlines():
            line = line.strip()
            m = re.match(r"(\S+) => (\S+)", line)
            if "not found" in line or (
                    m and not SYSTEM.match(m.group(1)) and
                    not os.path.realpath(m.group(2)).startswith(stage)):
                raise SystemExit(f"build_wheel: in the wheel, {f} does not "
                                 f"find its library inside it: {line}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--package", required=True, help="the gmlake package folder")
    ap.add_argument("--lib", required=True, help="libgmlake.so")
    ap.add_argument("--bin", action="append", default=[])
    ap.add_argument("--header", action="append", default=[],
                    help="C headers for gmlake/include (the native PyTorch "
                    "door is compiled against gmlake.h on first use)")
    args = ap.parse_args()

    name = os.path.basename(args.out)
    m = re.match(r"gmlake-([^-]+)-py3-none-manylinux_(\d+)_(\d+)_x86_64\.whl$",
                 name)
    if not m:
        raise SystemExit(f"build_wheel: {name} is not "
                         "gmlake-VERSION-py3-none-manylinux_X_Y_x86_64.whl")
    version, glibc_tag = m.group(1), (int(m.group(2)), int(m.group(3)))
    init = open(os.path.join(args.package, "__init__.py")).read()
    if f'__version__ = "{version}"' not in init:
        raise SystemExit(f"build_wheel: the wheel is {version} but "
                         f"{args.package}/__init__.py says otherwise")

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, f"gmlake-{version}")
        pkg = os.path.join(root, "gmlake")
        shutil.copytree(args.package, pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        lib_dir = os.path.join(pkg, "lib")
        bin_dir = os.path.join(pkg, "bin")
        os.makedirs(lib_dir)
        os.makedirs(bin_dir)
        if args.header:
            include_dir = os.path.join(pkg, "include")
            os.makedirs(include_dir)
            for h in args.header:
                shutil.copy(h, os.path.join(include_dir, os.path.basename(h)))

        elves = [shutil.copy(args.lib, os.path.join(lib_dir, "libgmlake.so"))]
        elves += [shutil.copy(b, os.path.join(bin_dir, os.path.basename(b)))
                  for b in args.bin]
        bundled = {}
        for f in (args.lib, *args.bin):
            bundled.update(needed_libraries(f))
        for soname, path in sorted(bundled.items()):
            elves.append(shutil.copy(path, os.path.join(lib_dir, soname)))
        for f in elves:
            os.chmod(f, 0o755)
            in_bin = os.path.dirname(f) == bin_dir
            run("patchelf", "--set-rpath",
                "$ORIGIN/../lib" if in_bin else "$ORIGIN", f)
        check_resolves_inside(os.path.realpath(root), elves)

        for f in elves:
            needs = version_needs(f)
            if needs.get("GLIBC", (0,)) > glibc_tag:
                raise SystemExit(f"build_wheel: {f} needs GLIBC_{needs['GLIBC']}, "
                                 f"newer than the tag manylinux_{glibc_tag}")
            if needs.get("GLIBCXX", (0,)) > MAX_GLIBCXX:
                raise SystemExit(f"build_wheel: {f} needs GLIBCXX "
                                 f"{needs['GLIBCXX']}, newer than {MAX_GLIBCXX}")

        info = os.path.join(root, f"gmlake-{version}.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: gmlake\nVersion: {version}\n"
                    "Summary: GMLake: GPU memory with virtual memory stitching, "
                    "as PyTorch's CUDA allocator\nRequires-Python: >=3.9\n")
        with open(os.path.join(info, "WHEEL"), "w") as f:
            f.write("Wheel-Version: 1.0\nGenerator: gmlake build_wheel.py\n"
                    "Root-Is-Purelib: false\n"
                    f"Tag: py3-none-manylinux_{glibc_tag[0]}_{glibc_tag[1]}_x86_64\n")
        with open(os.path.join(info, "entry_points.txt"), "w") as f:
            f.write(ENTRY_POINTS)
        with open(os.path.join(info, "top_level.txt"), "w") as f:
            f.write("gmlake\n")

        dest = os.path.join(tmp, "dist")
        os.makedirs(dest)
        packed = subprocess.run(
            [sys.executable, "-m", "wheel", "pack", root, "-d", dest],
            capture_output=True, text=True)
        if packed.returncode != 0:
            raise SystemExit("build_wheel: `python3 -m wheel pack` failed "
                             "(apt-get install python3-wheel):\n" + packed.stderr)
        built = os.listdir(dest)
        if built != [name]:
            raise SystemExit(f"build_wheel: wheel pack made {built}, not {name}")
        shutil.copy(os.path.join(dest, name), args.out)
        print(f"build_wheel: {name}: {len(bundled)} bundled libraries, "
              f"{os.path.getsize(args.out) >> 20} MiB")


if __name__ == "__main__":
    main()
