"""`BodyEdits.copy`: an independent copy, as `copy.deepcopy` gives, whatever the edits hold."""

from __future__ import annotations

import copy

from gateway.pipeline.context import BodyEdits


def test_copy_equals_deepcopy_and_shares_nothing_mutable() -> None:
    edits = BodyEdits(
        {
            "stream_options": {"include_usage": True},
            "max_tokens": 256,
            "stop": ["\n\n", "END"],
            "metadata": {"tags": ["a"], "user": "u1"},
            "tool_choice": None,
        },
        {"service_tier"},
    )
    copied = edits.copy()

    assert copied == copy.deepcopy(edits)
    assert copied.set_fields["stream_options"] is not edits.set_fields["stream_options"]
    copied.set_fields["stream_options"]["include_usage"] = False
    copied.set_fields["stop"].append("x")
    copied.set_fields["metadata"]["tags"].append("b")
    copied.remove.add("user")

    assert edits.set_fields["stream_options"] == {"include_usage": True}
    assert edits.set_fields["stop"] == ["\n\n", "END"]
    assert edits.set_fields["metadata"] == {"tags": ["a"], "user": "u1"}
    assert edits.remove == {"service_tier"}


def test_copy_of_a_dict_subclass_or_nested_value_keeps_its_type() -> None:
    class Options(dict):  # type: ignore[type-arg]
        pass

    edits = BodyEdits({"stream_options": Options(include_usage=True)})
    copied = edits.copy()
    assert type(copied.set_fields["stream_options"]) is Options
    assert copied.set_fields["stream_options"] == {"include_usage": True}
