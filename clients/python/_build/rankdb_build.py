"""A PEP 517 build backend in the standard library only, for `pip install`.

Why not setuptools: with build isolation pip first downloads the backend
(setuptools, wheel) from an index, which fails offline, and Debian's
setuptools 66 cannot build a wheel without the separate `wheel` package.
This backend needs nothing: `pip install ./clients/python` works on a
machine without network access, in a venv or not.

It builds a pure-Python wheel (rankdb-<version>-py3-none-any.whl) holding
the `rankdb` package, an sdist, and an editable wheel (a .pth file pointing
at this directory). The version is `__version__` in rankdb/__init__.py.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "rankdb"
SUMMARY = "rankdb client: rank-aware training telemetry that never stalls the training loop"


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    return m.group(1)


def _metadata():
    try:
        with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
            readme = f.read()
    except OSError:
        readme = ""
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nLicense: Apache-2.0\n"
            "Requires-Python: >=3.8\nProvides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n"
            "Description-Content-Type: text/markdown\n\n%s" % (NAME, _version(), SUMMARY, readme))


def _wheel_text():
    return "Wheel-Version: 1.0\nGenerator: rankdb_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _distinfo():
    return "%s-%s.dist-info" % (NAME, _version())


def _package_files():
    out = []
    for fn in sorted(os.listdir(os.path.join(HERE, NAME))):
        if fn.endswith(".py"):
            out.append(("%s/%s" % (NAME, fn), os.path.join(HERE, NAME, fn)))
    return out


def _write_wheel(wheel_directory, entries):
    """entries: [(archive name, bytes)] -> the wheel's file name."""
    di = _distinfo()
    entries = list(entries) + [(di + "/METADATA", _metadata().encode()),
                               (di + "/WHEEL", _wheel_text().encode())]
    record = []
    for name, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(di + "/RECORD,,")
    entries.append((di + "/RECORD", ("\n".join(record) + "\n").encode()))
    fname = "%s-%s-py3-none-any.whl" % (NAME, _version())
    with zipfile.ZipFile(os.path.join(wheel_directory, fname), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data, zipfile.ZIP_DEFLATED)
    return fname


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_sdist = get_requires_for_build_wheel
get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _distinfo())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_text())
    return _distinfo()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(n, _read(p)) for n, p in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("_rankdb_editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    fname = base + ".tar.gz"
    files = ["pyproject.toml", "README.md", "_build/rankdb_build.py"] + [n for n, _ in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, fname), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in files:
            p = os.path.join(HERE, rel)
            if os.path.exists(p):
                t.add(p, arcname="%s/%s" % (base, rel))
        pkg = _metadata().encode()
        ti = tarfile.TarInfo("%s/PKG-INFO" % base)
        ti.size = len(pkg)
        t.addfile(ti, io.BytesIO(pkg))
    return fname
