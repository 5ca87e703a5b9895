"""docs/API.md runs: every shell example of the API reference is run, in
order, against one real server (so examples write the data later ones
read), and each answer shown in the doc is compared with the real one by
field names and shapes (never timings or volatile numbers).

How the doc is read: each ```sh block is cut into chunks, a chunk being a
run of command lines followed by the `# ` lines of its shown answer. A
chunk runs with bash after its address (127.0.0.1:7461, UDP 8089) is
pointed at the test server; $TOKEN is the admin token. The shown answer:
  - JSON (after an optional status such as `200 `): when it parses, the
    real answer must have the same shape (same keys in every object, same
    kinds of values; list items compared as far as both go); when it
    elides (`...`), every field name shown must occur in the real answer;
  - `HTTP/1.1 <code> ...`: the real status line has that code;
  - other text (Prometheus lines): each shown metric name occurs;
  - a list shown with items must not come back empty.
A shown status other than 200 (`400 {...}`) is checked through -w."""

import json
import os
import re
import socket
import subprocess

from harness import REPO, Server

TOKEN = "docs-token"
DOC = os.path.join(REPO, "docs", "API.md")


def _chunks(text):
    """(commands, shown answer lines) of every sh block, in order."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        cmd, shown = [], []
        for line in block.splitlines():
            if line.startswith("#"):
                shown.append(line[1:].strip())
                continue
            if shown or (cmd and not line.strip()):
                if cmd:
                    out.append(("\n".join(cmd), shown))
                cmd, shown = [], []
            if line.strip():
                cmd.append(line)
        if cmd:
            out.append(("\n".join(cmd), shown))
    return out


def _keys(v, acc):
    if isinstance(v, dict):
        for k, x in v.items():
            acc.add(k)
            _keys(x, acc)
    elif isinstance(v, list):
        for x in v:
            _keys(x, acc)
    return acc


def _values_of(v, key, acc):
    if isinstance(v, dict):
        for k, x in v.items():
            if k == key:
                acc.append(x)
            _values_of(x, key, acc)
    elif isinstance(v, list):
        for x in v:
            _values_of(x, key, acc)
    return acc


def _kind(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if v is None:
        return "null"
    return type(v).__name__


def _same_shape(shown, real, path, problems):
    ks, kr = _kind(shown), _kind(real)
    if "null" in (ks, kr) or (ks == "str" and kr == "number") or (ks == "number" and kr == "str"):
        return  # a value that may be absent, or a number written as a string (NaN)
    if ks != kr:
        problems.append("%s: shown %s, real %s" % (path, ks, kr))
        return
    if ks == "dict":
        if set(shown) != set(real):
            problems.append("%s: fields shown %s, real %s" % (path, sorted(shown), sorted(real)))
        for k in set(shown) & set(real):
            _same_shape(shown[k], real[k], path + "." + k, problems)
    elif ks == "list":
        for i, (a, b) in enumerate(zip(shown, real)):
            _same_shape(a, b, "%s[%d]" % (path, i), problems)


def _json_docs(text):
    """The JSON values in text (one per line group), best effort."""
    dec = json.JSONDecoder()
    vals, i = [], 0
    while i < len(text):
        j = min([p for p in (text.find("{", i), text.find("[", i)) if p >= 0] or [-1])
        if j < 0:
            break
        try:
            v, end = dec.raw_decode(text, j)
            vals.append(v)
            i = end
        except ValueError:
            i = j + 1
    return vals


def _check(cmd, shown, real, status, problems):
    text = " ".join(shown)
    text = re.sub(r"\s+->.*?(?=$|\s#)", "", text)
    m = re.match(r"^HTTP/1\.1 (\d{3})", text)
    if m:
        if not re.search(r"HTTP/1\.1 %s" % m.group(1), real):
            problems.append("status %s shown, real answer starts %r" % (m.group(1), real[:80]))
        return
    m = re.match(r"^(\d{3}) ", text)
    if m:
        if status != m.group(1):
            problems.append("status %s shown, real %s" % (m.group(1), status))
        text = text[4:]
    if not text.startswith(("{", "[")):
        for name in re.findall(r"^([a-z_]+)\b", text):
            if name not in real:
                problems.append("%s not in the answer" % name)
        return
    real_vals = _json_docs(real)
    if not real_vals:
        problems.append("no JSON in the real answer: %r" % real[:200])
        return
    # a list shown with items must not come back empty (data no example wrote)
    for key in set(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)":\s*\[\s*[^\]\s]', text)):
        got = []
        for v in real_vals:
            _values_of(v, key, got)
        if got and all(isinstance(x, list) and not x for x in got):
            problems.append("%s is shown with items but came back empty" % key)
    if text.startswith("[") and real_vals[-1] == []:
        problems.append("the answer shown is a non-empty list, the real one is empty")
    if "..." not in text:
        shown_vals = _json_docs(text)
        if len(shown_vals) == 1 and len(real_vals) >= 1:
            _same_shape(shown_vals[0], real_vals[-1], "$", problems)
            return
    names = set(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)":', text))
    have = set()
    for v in real_vals:
        _keys(v, have)
    missing = sorted(names - have)
    if missing:
        problems.append("fields shown but not in the answer: %s" % missing)


def _free_udp_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_api_md_examples_run_and_match():
    udp = _free_udp_port()
    s = Server(["--admin-token", TOKEN, "--udp-port", str(udp)]).start()
    env = dict(os.environ, TOKEN=TOKEN)
    problems = []
    chunks = _chunks(open(DOC).read())
    assert len(chunks) > 25, len(chunks)
    for cmd, shown in chunks:
        run = cmd.replace("127.0.0.1:7461", "127.0.0.1:%d" % s.port)
        run = run.replace("/dev/udp/127.0.0.1/8089", "/dev/udp/127.0.0.1/%d" % udp)
        status = None
        if shown and re.match(r"^\d{3} ", shown[0]) and run.count("curl ") == 1 and \
                "|" not in run.split("curl ", 1)[1]:
            run = run.replace("curl ", "curl -w '\\n%{http_code}' ", 1)
        p = subprocess.run(["bash", "-c", run], capture_output=True, text=True, timeout=60,
                           env=env)
        out = p.stdout
        if "%{http_code}" in run:
            out, _, status = out.rpartition("\n")
        if p.returncode != 0:
            problems.append("%s\n  exit %d: %s" % (cmd, p.returncode, p.stderr[:300]))
            continue
        if os.environ.get("RDB_DOCS_DUMP"):
            with open(os.environ["RDB_DOCS_DUMP"], "a") as f:
                f.write("$ %s\n%s\n" % (cmd, out))
        if not shown:
            continue
        mine = []
        _check(cmd, shown, out, status, mine)
        for m in mine:
            problems.append("%s\n  %s\n  real: %s" % (cmd.splitlines()[0], m, out[:400]))
    s.stop()
    assert not problems, "docs/API.md examples differ from the server:\n" + "\n".join(problems)
