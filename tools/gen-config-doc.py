#!/usr/bin/env python3
"""Regenerates the "Configuration reference" table of docs/OPERATIONS.md from
conf/rankdb.conf (which `rankdbd --print-default-conf` generates from the
option table in server/config.c). Run after adding or changing an option:

    build/server/rankdbd --print-default-conf > conf/rankdb.conf
    tools/gen-config-doc.py

With --check it changes nothing and exits 1 when the doc is stale (CI)."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONF = os.path.join(ROOT, "conf", "rankdb.conf")
DOC = os.path.join(ROOT, "docs", "OPERATIONS.md")
HEAD = "## Configuration reference"


def options():
    with open(CONF) as f:
        blocks = f.read().split("\n\n")[1:]  # the first block is the file's header
    for b in blocks:
        lines = b.strip().splitlines()
        comments = [l[2:] if l.startswith("# ") else l[1:] for l in lines if l.startswith("#")]
        setting = [l for l in lines if not l.startswith("#")]
        if not setting:
            continue
        name, value = [x.strip() for x in setting[0].split("=", 1)]
        typ = [c for c in comments if c.startswith("Type: ")]
        doc = " ".join(c for c in comments if not c.startswith("Type: "))
        yield name, value, typ[0][6:] if typ else "", doc


def table():
    out = ["| option (flag) | default | values | what it does |", "|---|---|---|---|"]
    for name, value, typ, doc in options():
        flag = "--" + name.replace("_", "-")
        out.append("| `%s` (`%s`) | `%s` | %s | %s |" % (name, flag, value, typ,
                                                         doc.replace("|", "\\|")))
    return "\n".join(out) + "\n"


def main():
    with open(DOC) as f:
        text = f.read()
    start = text.index(HEAD)
    tstart = text.index("| option (flag)", start)
    m = re.compile(r"\n(?!\|)").search(text, tstart)
    tend = m.start() + 1 if m else len(text)
    new = text[:tstart] + table() + text[tend:]
    if "--check" in sys.argv:
        if new != text:
            print("docs/OPERATIONS.md: the configuration reference is stale; run "
                  "tools/gen-config-doc.py")
            return 1
        return 0
    with open(DOC, "w") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
