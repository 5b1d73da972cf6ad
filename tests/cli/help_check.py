#!/usr/bin/env python3
"""Checks one --help text against the flag-table conventions and the README.

Usage: help_check.py PROGRAM HELP_FILE README [README_SYNOPSIS_PREFIX]

PROGRAM is what the text is for ("moesplit-dense", "moesplit plan"). Checks:
  1. it starts with "usage: " and lists at least one flag;
  2. every flag that takes a value states its default or that it is required
     ("(default: ...)" / "required"); switches need not;
  3. every flag it lists is mentioned in the README ("--name" or "-n"), so the
     README's flag lists cannot fall behind the binaries;
  4. every flag in the README's synopses of PROGRAM (a `...` span starting
     with README_SYNOPSIS_PREFIX, default PROGRAM + " ") is one it lists, so
     the README names no flag that does not exist.
Prints one line per problem and exits 1 if there is any.
"""
import re
import sys

program, help_file, readme_file = sys.argv[1:4]
prefix = sys.argv[4] if len(sys.argv) > 4 else program + " "
text = open(help_file).read()
readme = open(readme_file).read()
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
    if len(name) > 2 and not re.search(re.escape(name) + r"(?![a-z0-9-])", readme):
        problems.append(f"{name}: not in README.md")

for span in re.findall(r"`([^`]*)`", readme, flags=re.S):
    span = " ".join(span.split())
    if not span.startswith(prefix):
        continue
    for name in re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", span[len(prefix) - 1:]):
        # A one-letter name may be written with two dashes ("--d N").
        if name not in flags and not (len(name) == 3 and name[1:] in flags):
            problems.append(f"README synopsis `{span[:60]}...` names {name}, which {program} does not take")

for p in problems:
    print(f"{program}: {p}")
sys.exit(1 if problems else 0)
