"""`dxstudio screenshot`: the real window, offscreen, to a PNG of the asked size."""
from __future__ import annotations

import struct

import pytest

from dxstudio.cli import main


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])  # IHDR width, height


@pytest.mark.parametrize("screen", ["review", "training", "results"])
def test_screenshot_writes_a_png_of_the_asked_size(receipts_project, tmp_path, screen, capsys):
    out = tmp_path / f"{screen}.png"
    rc = main(["screenshot", str(receipts_project), str(out), "--screen", screen, "--steps", "8", "--size", "1280x800"])
    assert rc == 0, capsys.readouterr().err
    assert png_size(out) == (1280, 800)
    assert out.stat().st_size > 10_000  # a drawn window, not a blank image
    # the project itself gets no run folder from a screenshot (training happens on a copy)
    assert not any((receipts_project / "runs").iterdir())


def test_screenshot_refuses_bad_arguments_with_a_message(receipts_project, tmp_path, capsys):
    assert main(["screenshot", str(receipts_project), str(tmp_path / "a.png"), "--size", "big"]) == 2
    assert "--size" in capsys.readouterr().err
    assert main(["screenshot", str(receipts_project), str(tmp_path / "a.png"), "--size", "400x300"]) == 2
    assert "cannot be that small" in capsys.readouterr().err
    assert main(["screenshot", str(tmp_path / "nowhere"), str(tmp_path / "b.png")]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists() and not (tmp_path / "b.png").exists()
