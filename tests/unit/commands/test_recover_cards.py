"""The card-to-replace record (commands/recovery/cards.py): one JSON file per serial, its first mark kept and
counted, written whole."""

from __future__ import annotations

import json

from provision.commands.recovery.cards import Card, mark, path_of, read


def failing(serial: str = "1654123456789") -> Card:
    return Card(serial, "gpu-3", "00000000:2A:00.0", "GPU-5c3a", ["no_gpu_is_lost: GPU 0000:2A:00.0 has fallen off the bus"])


def test_a_card_marked_twice_keeps_its_first_mark_and_counts(tmp_path) -> None:
    first = mark(failing(), "2026-11-28T17:00:00Z", tmp_path)
    again = mark(failing(), "2026-11-28T18:30:00Z", tmp_path)
    assert (first.times, again.times) == (1, 2)
    assert (again.first, again.last) == ("2026-11-28T17:00:00Z", "2026-11-28T18:30:00Z")
    assert read("1654123456789", tmp_path) == again
    stored = json.loads(path_of("1654123456789", tmp_path).read_text())
    assert stored["schema"] == "provision-card/1" and stored["slot"] == "00000000:2A:00.0"
    assert [p.name for p in tmp_path.iterdir()] == ["1654123456789.json"]  # no temporary file left beside it


def test_the_report_names_card_slot_and_host(tmp_path) -> None:
    card = mark(failing(), "2026-11-28T17:00:00Z", tmp_path)
    assert card.words() == ("replace the card in slot 00000000:2A:00.0 of gpu-3 (serial 1654123456789): "
                            "no_gpu_is_lost: GPU 0000:2A:00.0 has fallen off the bus (marked 1 time since "
                            "2026-11-28T17:00:00Z)")


def test_a_serial_is_made_safe_as_a_file_name_and_an_unreadable_record_starts_again(tmp_path) -> None:
    assert path_of("../x y", tmp_path).name == ".._x_y.json"
    path_of("bad", tmp_path).write_text("{not json")
    assert read("bad", tmp_path) is None
    assert mark(failing("bad"), "2026-11-28T17:00:00Z", tmp_path).times == 1
