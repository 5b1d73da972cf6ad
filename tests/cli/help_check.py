#!/usr/bin/env python3
"""Checks one --help text against the flag-table conventions and the docs.

Usage: help_check.py PROGRAM HELP_FILE --docs FILE... [--synopses FILE...]
                     [--prefix SYNOPSIS_PREFIX]

PROGRAM is what the text is for ("moesplit-dense", "moesplit plan"). The
documentation is README.md plus the topic pages it links (docs/*.md): --docs
names them. Checks:
  1. it starts with "usage: " and lists at least one flag;
  2. every flag that takes a value states its default or that it is required
     ("(default: ...)" / "required"); switches need not;
  3. every flag it lists is mentioned in the --docs files ("--name" or "-n"),
     so the documented flag lists cannot fall behind the binaries;
  4. every flag in a synopsis of PROGRAM (a `...` span starting with
     SYNOPSIS_PREFIX, default PROGRAM + " ") in the --docs files and the
     --synopses files is one it lists, so the docs name no flag that does not
     exist.
Prints one line per problem and exits 1 if there is any; otherwise prints
"synopses: N", the number of synopses of PROGRAM that check 4 read, so that a
caller can tell that it checked something.
"""
import argparse
import re
import sys

parser = argparse.ArgumentParser()
parser.add_argument("program")
parser.add_argument("help_file")
parser.add_argument("--docs", nargs="+", required=True)
parser.add_argument("--synopses", nargs="*", default=[])
parser.add_argument("--prefix")
args = parser.parse_args()
program = args.program
prefix = args.prefix if args.prefix is not None else program + " "
text = open(args.help_file).read()
docs = "\n".join(open(f).read() for f in args.docs)
synopsis_text = "\n".join([docs] + [open(f).read() for f in args.synopses])
doc_names = ", ".join(args.docs) if len(args.docs) <= 3 else f"{args.docs[0]} and {len(args.docs) - 1} more"
problems = []

if not text.startswith("usage: "):
    problems.append("does not start with 'usage: '")

# "  --name, -n META   help (default: x)", continued on lines indented by
# more than two spaces.
lines = []
for line in text.splitlines():
    if lines and re.match(r"^ {4,}\S", line) and lines[-1].startswith("  -"):
        lines[-1] += " " + line.strip()
    else:
        lines.append(line)
flags = {}
for line in lines:
    m = re.match(r"^  ((?:--?[a-z0-9][a-z0-9-]*)(?:, --?[a-z0-9][a-z0-9-]*)*)( \S+)?(?:\s{2,}|$)(.*)", line)
    if not m:
        continue
    names = [n.strip() for n in m.group(1).split(",")]
    takes_value = m.group(2) is not None
    for n in names:
        flags[n] = (takes_value, line)
builtin = {"-h", "--help", "--version"}
if not set(flags) - builtin:
    problems.append("lists no flags")

for name, (takes_value, line) in sorted(flags.items()):
    if name in builtin:
        continue
    if takes_value and "(default: " not in line and "required" not in line:
        problems.append(f"{name}: states no default: {line.strip()}")
    # A one-letter alias is fine unmentioned when its long name is mentioned.
    if len(name) > 2 and not re.search(re.escape(name) + r"(?![a-z0-9-])", docs):
        problems.append(f"{name}: not in the docs ({doc_names})")

synopses = 0
for span in re.findall(r"`([^`]*)`", synopsis_text, flags=re.S):
    span = " ".join(span.split())
    if not span.startswith(prefix):
        continue
    synopses += 1
    for name in re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", span[len(prefix) - 1:]):
        # A one-letter name may be written with two dashes ("--d N").
        if name not in flags and not (len(name) == 3 and name[1:] in flags):
            problems.append(f"synopsis `{span[:60]}...` names {name}, which {program} does not take")

for p in problems:
    print(f"{program}: {p}")
if not problems:
    print(f"synopses: {synopses}")
sys.exit(1 if problems else 0)
