"""What a details fetch asks for: an annotated tag's own object (its tagger's date comes along), else the commit."""

from __future__ import annotations

from gitreg.git.remote import TagObjects, _RefParser

URL = "https://git.example.test/acme/vpc.git"
TAG_OBJECT, COMMIT, OTHER = "1" * 40, "2" * 40, "3" * 40


def test_ls_remote_names_an_annotated_tags_object_and_a_lightweight_tags_commit():
    parser = _RefParser(URL)
    for line in (f"{TAG_OBJECT}\trefs/tags/v1.0.0", f"{COMMIT}\trefs/tags/v1.0.0^{{}}", f"{OTHER}\trefs/tags/v1.1.0"):
        parser.feed(line + "\n")
    tags = parser.result()
    assert tags == {"v1.0.0": COMMIT, "v1.1.0": OTHER}  # versions point at commits, as before
    objects = TagObjects()
    objects.keep(URL, parser.objects(tags))
    assert objects.want(URL, "v1.0.0", COMMIT) == TAG_OBJECT
    assert objects.want(URL, "v1.1.0", OTHER) == OTHER
    assert objects.want(URL, "v1.0.0", OTHER) == OTHER  # the tag moved since: its commit, never a stale object
    assert objects.want("https://elsewhere.test/x.git", "v1.0.0", COMMIT) == COMMIT


def test_tag_objects_are_bounded_the_repositories_listed_longest_ago_forgotten_first():
    objects = TagObjects(limit=4)
    for n in range(3):
        objects.keep(f"{URL}/{n}", {"v1.0.0": (TAG_OBJECT, COMMIT), "v2.0.0": (TAG_OBJECT, OTHER)})
    assert [objects.want(f"{URL}/{n}", "v1.0.0", COMMIT) for n in range(3)] == [COMMIT, TAG_OBJECT, TAG_OBJECT]
    objects.keep(f"{URL}/1", {})  # listed again, no annotated tag left
    assert objects.want(f"{URL}/1", "v1.0.0", COMMIT) == COMMIT and objects.of(f"{URL}/2") == {
        "v1.0.0": (TAG_OBJECT, COMMIT),
        "v2.0.0": (TAG_OBJECT, OTHER),
    }
