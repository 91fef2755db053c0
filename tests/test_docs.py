"""The documentation builds: MkDocs in strict mode (a broken link between pages, a missing
anchor or a page left out of the navigation fails), and the README stays a front door."""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_docs_build_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    mkdocs = shutil.which("mkdocs") or os.path.join(os.path.dirname(sys.executable), "mkdocs")
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "league" / "index.html").is_file()


def test_the_readme_is_a_front_door_and_speaks_of_no_issue():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert len(readme.splitlines()) <= 200
    for path in [os.path.join(ROOT, "README.md")] + [os.path.join(ROOT, "docs", f) for f in
                                                     os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")]:
        found = re.findall(r"\b(issues?|sessions?|reviewers?)\b", open(path).read(), re.IGNORECASE)
        assert not found, f"{os.path.relpath(path, ROOT)} speaks of {found}"
