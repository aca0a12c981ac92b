"""The one build step pyproject.toml cannot declare: the wheel carries the bundled files.

All metadata is in pyproject.toml. The sample project (resources/sample/) and the base models
(resources/models/*.safetensors, with their notes *.md and *.txt) live beside the package in
the repository; building a wheel (`pip install .`, `python -m build`) copies them into the
package as dxstudio/resources/, where dxstudio.bundled finds them. An editable install reads
resources/ in place. MANIFEST.in puts the same files in the source distribution.
"""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# (folder under resources/, the files of it the wheel carries)
BUNDLED = [("sample", ["**/*"]), ("models", ["*.safetensors", "*.md", "*.txt"])]
SKIP = {"runs", ".cache", "__pycache__"}  # a sample that was used in place: not its runs


def bundled_files() -> list[Path]:
    """Paths relative to resources/ of every file the wheel carries, sorted."""
    out = set()
    for folder, patterns in BUNDLED:
        base = HERE / "resources" / folder
        for pattern in patterns:
            for p in base.glob(pattern):
                rel = p.relative_to(HERE / "resources")
                if p.is_file() and not SKIP.intersection(rel.parts) and not p.name.startswith("."):
                    out.add(rel)
    return sorted(out)


class BuildWithResources(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads resources/ in place
            return
        files = bundled_files()
        if not any(rel.parts[0] == "sample" for rel in files):
            raise SystemExit(f"{HERE / 'resources' / 'sample'}: the bundled sample project is missing")
        for rel in files:
            target = Path(self.build_lib) / "dxstudio" / "resources" / rel
            self.mkpath(str(target.parent))
            self.copy_file(str(HERE / "resources" / rel), str(target))


setup(cmdclass={"build_py": BuildWithResources})
