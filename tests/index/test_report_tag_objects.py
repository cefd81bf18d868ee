"""The index process tells the serving process its repositories' annotated tag objects (TagObjectsKnown):
the version picker's dates are then read by tag object (the tagger's date). The line comes from the
process that reads hostile repository content: anything but object names is left out."""

from __future__ import annotations

from gitreg.index.protocol import TagObjectsKnown, decode_report, encode_report

TAG, COMMIT = "a" * 40, "b" * 40


def test_tag_objects_go_over_the_wire_and_only_object_names_are_taken():
    sent = TagObjectsKnown("https://git.example.com/acme/vpc.git", {"v1.0.0": (TAG, COMMIT)})
    assert decode_report(encode_report(sent)) == sent
    line = (
        b'{"tag_objects": {"key": "k", "objects": {"ok": ["' + TAG.encode() + b'", "' + COMMIT.encode() + b'"],'
        b' "short": ["abc", "def"], "upper": ["' + TAG.upper().encode() + b'", "' + COMMIT.encode() + b'"],'
        b' "three": ["' + TAG.encode() + b'", "' + COMMIT.encode() + b'", "x"], "none": null}}}\n'
    )
    assert decode_report(line) == TagObjectsKnown("k", {"ok": (TAG, COMMIT)})
    assert decode_report(b'{"tag_objects": {"key": 1, "objects": {}}}\n') is None
    assert decode_report(b'{"tag_objects": ["k"]}\n') is None
