#!/usr/bin/env python3
"""Structure of docker/*.Dockerfile (no Docker daemon here to build them).

  dockerfile_check.py REPO BIN_DIR

For each image: multi-stage; every base image is tagged (never :latest) and
takes an optional digest build ARG (`FROM x:tag${X_DIGEST:+@}${X_DIGEST}`);
the final stage is the runtime (no toolchain, not a CUDA image), runs as a
non-root numeric user, has a HEALTHCHECK through `moesplit health` whose port
comes from an ENV variable whose default is the gRPC port it exposes and
listens on, exposes the HTTP port the dense image listens on, declares
/models as a volume and copies no model in; the binaries it copies are the
ones built; every shared library those binaries link (ldd, resolved to Debian
packages with dpkg -S) comes from a package the runtime stage installs or from
the base image, and every CUDA library they link (NEEDED entries under
/usr/local/cuda) is copied by name, and no other CUDA file or folder is.
.dockerignore keeps models and build trees out of the context.
"""
import fnmatch
import glob
import json
import os
import re
import subprocess
import sys

REPO, BIN = sys.argv[1], sys.argv[2]
IMAGES = {"dense.Dockerfile": ["moesplit-dense", "moesplit"],
          "expert-worker.Dockerfile": ["moesplit-expert-worker", "moesplit"]}
# Packages of debian:12-slim itself.
BASE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1", "zlib1g", "libzstd1", "liblzma5",
                 "libbz2-1.0", "libcrypt1", "libselinux1", "libpcre2-8-0", "libsystemd0",
                 "libgcrypt20", "libgpg-error0", "liblz4-1", "libcap2", "libmd0",
                 "libacl1", "libattr1", "libaudit1", "libudev1", "libtinfo6"}
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL", msg)


def instructions(text):
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def read_dpkg():
    """Installed packages' Depends (from /var/lib/dpkg/status) and file owners."""
    deps, block = {}, {}
    for para in open("/var/lib/dpkg/status", encoding="utf-8", errors="replace").read().split("\n\n"):
        fields, key = {}, None
        for line in para.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Status", "").endswith("install ok installed") and "Package" in fields:
            name = fields["Package"]
            deps[name] = ",".join(filter(None, [fields.get("Depends", ""), fields.get("Pre-Depends", "")]))
            for virt in fields.get("Provides", "").split(","):
                if virt.strip():
                    block.setdefault(virt.strip().split(" ")[0], name)
    owners = {}
    for lst in glob.glob("/var/lib/dpkg/info/*.list"):
        pkg = os.path.basename(lst)[:-5].split(":")[0]
        for f in open(lst, encoding="utf-8", errors="replace"):
            owners.setdefault(f.rstrip("\n"), pkg)
    return deps, block, owners


DEPS, PROVIDED, OWNERS = read_dpkg()


def closure(image, packages):
    """The packages and everything they depend on (this machine's dpkg records;
    of alternatives, the first one installed or provided)."""
    seen, todo = set(), list(packages)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        if p not in DEPS:
            fail(f"{image}: runtime package {p} is not a Debian package installed on this machine")
            continue
        for group in DEPS[p].split(","):
            alts = [a.strip().split(" ")[0].split(":")[0] for a in group.split("|") if a.strip()]
            pick = next((a for a in alts if a in DEPS), None) or \
                next((PROVIDED[a] for a in alts if a in PROVIDED), None)
            if alts and pick is None:
                fail(f"{image}: {p} depends on {group.strip()}, of which nothing is installed here")
            elif pick:
                todo.append(pick)
    return seen


def package_of(lib):
    real = os.path.realpath(lib)
    for path in (lib, real):
        for variant in (path, path.replace("/usr/lib/", "/lib/", 1), path.replace("/lib/", "/usr/lib/", 1)):
            if variant in OWNERS:
                return OWNERS[variant]
    return None


for name, binaries in IMAGES.items():
    path = os.path.join(REPO, "docker", name)
    ins = instructions(open(path).read())
    froms = [i for i, (w, _) in enumerate(ins) if w == "FROM"]
    if len(froms) < 2:
        fail(f"{name}: not multi-stage ({len(froms)} FROM)")
        continue
    final = ins[froms[-1]:]
    base = final[0][1].split()[0]
    if name.startswith("expert") and re.sub(r"\$\{\w+:\+@\}\$\{\w+\}$", "", base) != "debian:12-slim":
        fail(f"{name}: runtime base is {base}, want debian:12-slim")
    if any(w == "RUN" and re.search(r"\b(g\+\+|cmake|nvcc|clang|ninja-build|install-deps)\b", a) for w, a in final):
        fail(f"{name}: the runtime stage installs or runs a toolchain")
    users = [a for w, a in final if w == "USER"]
    if not users or re.match(r"^(0|root)(:|$)", users[-1]) or not re.match(r"^[1-9][0-9]*(:[0-9]+)?$", users[-1]):
        fail(f"{name}: final USER {users[-1:]} is not a numeric non-root user")
    ports = [int(p) for w, a in final if w == "EXPOSE" for p in a.split()]
    env = dict(kv for w, a in final if w == "ENV" for kv in re.findall(r"(\w+)=(\S+)", a))
    health = [a for w, a in final if w == "HEALTHCHECK"]
    m = re.search(r'CMD \["/bin/sh", "-c", "exec moesplit health --addr 127\.0\.0\.1:\$\{(\w+)\}"\]',
                  health[0]) if health else None
    if not m:
        fail(f"{name}: no HEALTHCHECK running `moesplit health --addr 127.0.0.1:${{PORT_VARIABLE}}`: {health}")
    elif m.group(1) not in env:
        fail(f"{name}: the HEALTHCHECK's port variable {m.group(1)} has no ENV default")
    cmd = json.loads(next(a for w, a in final if w == "CMD"))
    listen = [int(x.group(1)) for c in cmd for x in [re.search(r"^0\.0\.0\.0:(\d+)$", c)] if x]
    port = int(env[m.group(1)]) if m and m.group(1) in env else None
    if m and (port not in ports or port not in listen):
        fail(f"{name}: health port {m.group(1)}={port} is not exposed ({ports}) and listened on ({cmd})")
    if "--http" in cmd:
        http = int(cmd[cmd.index("--http") + 1].rsplit(":", 1)[1])
        if http not in ports:
            fail(f"{name}: the HTTP API's port {http} is not exposed ({ports})")
    elif name.startswith("dense"):
        fail(f"{name}: the default CMD does not serve the OpenAI HTTP API (--http)")
    stages = {a.split()[-1] for w, a in ins if w == "FROM" and " AS " in a.upper()}
    for w, a in ins:
        if w != "FROM":
            continue
        image = a.split()[0]
        if image in stages:
            continue
        tag = re.sub(r"\$\{\w+:\+@\}\$\{\w+\}$", "", image).rsplit("/", 1)[-1].partition(":")[2]
        if not tag or tag == "latest" or "@" in tag:
            fail(f"{name}: base image {image} has no version tag (or :latest)")
        if not re.search(r"\$\{(\w+_DIGEST):\+@\}\$\{\1\}$", image) and "@sha256:" not in image:
            fail(f"{name}: base image {image} cannot be pinned by digest (no ${{X_DIGEST:+@}}${{X_DIGEST}})")
    if "nvidia/cuda" in base or base.split(":")[0] in stages:
        fail(f"{name}: the runtime stage is based on {base}, not a slim Debian")
    cuda_copies = [a for w, a in final if w == "COPY" and "/cuda" in a]
    cuda_build = any(w == "RUN" and "-DMOESPLIT_CUDA=ON" in a for w, a in ins)
    for a in cuda_copies:
        for src in a.split()[1:-1]:
            if not src.startswith("--") and (src.endswith("/") or not re.search(r"/lib[\w.+-]+\.so[\w.*]*$", src)):
                fail(f"{name}: copies more than named CUDA libraries: COPY {a}")
    if "/models/" not in " ".join(cmd):
        fail(f"{name}: default CMD does not read the model from /models")
    if not any(w == "VOLUME" and "/models" in a for w, a in final):
        fail(f"{name}: no VOLUME /models")
    for w, a in ins:
        if w in ("COPY", "ADD") and re.search(r"\.gguf|models?/", a) and "/models/" not in a.split()[-1]:
            fail(f"{name}: copies a model: {w} {a}")
        if w == "ADD" and re.search(r"https?://", a):
            fail(f"{name}: downloads with ADD: {a}")
    copied = " ".join(a for w, a in final if w == "COPY" and "--from=build" in a)
    for b in binaries:
        if f"/build/bin/{b} " not in copied + " ":
            fail(f"{name}: does not copy {b} from the build stage")
    # Runtime libraries: every linked library's Debian package is installed.
    installed = set()
    for w, a in final:
        if w == "RUN" and "apt-get install" in a:
            installed |= set(re.findall(r"(?<![\w-])(lib[a-z0-9+.\-]+|ca-certificates)(?![\w-])",
                                        a.split("apt-get install", 1)[1].split("&&")[0]))
    if not installed:
        fail(f"{name}: the runtime stage installs no library package")
    installed = closure(name, installed)
    for b in binaries:
        exe = os.path.join(BIN, b)
        if not os.path.exists(exe):
            fail(f"{name}: {exe} is not built")
            continue
        ldd = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
        for lib in re.findall(r"=> (/\S+)", ldd):
            if lib.startswith("/usr/local/cuda") and not cuda_build:
                continue  # this image builds without CUDA (-DMOESPLIT_CUDA=OFF); this tree did not
            if lib.startswith("/usr/local/cuda"):
                soname = os.path.basename(lib)
                if not any(fnmatch.fnmatch(soname, os.path.basename(src))
                           for a in cuda_copies for src in a.split()[1:-1] if not src.startswith("--")):
                    fail(f"{name}: {b} links {soname}, which the runtime stage does not copy")
                continue
            if "libcuda.so" in lib:
                continue  # the driver's, from the NVIDIA container runtime
            pkg = package_of(lib)
            if pkg is None:
                fail(f"{name}: {b} links {lib}, which no Debian package provides")
            elif pkg not in installed and pkg not in BASE_PACKAGES:
                fail(f"{name}: {b} links {lib} from {pkg}, which the runtime stage does not install")
    print(f"{'ok  ' if not [f for f in failures if f.startswith(name)] else 'FAIL'} {name}")

ignore = open(os.path.join(REPO, ".dockerignore")).read().split()
for want in ("**/*.gguf", "build/", ".git"):
    if want not in ignore:
        fail(f".dockerignore does not exclude {want}")
print(f"dockerfiles: {len(failures)} problem(s)" if failures else "dockerfiles: every check passed")
sys.exit(1 if failures else 0)
