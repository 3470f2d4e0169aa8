"""Redaction as pure functions: secrets never survive, identifiers always do, free text only
for roles allowed it."""

from hypothesis import given
from hypothesis import strategies as st

from runwright.access.redaction import (
    MASK,
    Disclosure,
    event_view,
    mask_spec,
    redact_text,
    scrub,
    secret_values,
)
from runwright.access.roles import Actor, Permission, Role

SPEC = {
    "name": "r",
    "environment": {
        "env": {"HF_TOKEN": "hf_abcdefgh", "WANDB_API_KEY": "k3y-value", "OMP_NUM_THREADS": "4",
                "DB_PASSWORD": "pw", "AWS_SECRET_ACCESS_KEY": "aws/secret+value"},
    },
}  # fmt: skip


def test_secret_looking_names_are_masked_and_others_kept():
    env = mask_spec(SPEC)["environment"]["env"]
    assert env == {"HF_TOKEN": MASK, "WANDB_API_KEY": MASK, "OMP_NUM_THREADS": "4",
                   "DB_PASSWORD": MASK, "AWS_SECRET_ACCESS_KEY": MASK}  # fmt: skip
    assert SPEC["environment"]["env"]["HF_TOKEN"] == "hf_abcdefgh"  # the input is left alone
    # Values too short to scrub from free text are still masked in the spec itself.
    assert secret_values(SPEC) == ("aws/secret+value", "hf_abcdefgh", "k3y-value")


@given(st.text(), st.text(), st.sampled_from(["hf_abcdefgh", "k3y-value", "aws/secret+value"]))
def test_no_secret_survives_scrubbing_anywhere(before, after, secret):
    nested = {"a": [before + secret + after, {"b": (secret, 3)}], "c": secret}
    text = repr(scrub(nested, secret_values(SPEC)))
    assert secret not in text


def test_free_text_is_redacted_but_identifiers_and_numbers_kept():
    attributes = {
        "failure_class": "data",
        "rank": 1,
        "loss": 0.5,
        "path": "/runs/r-1/checkpoints/00000004-abc",
        "message": "ValueError: bad sample 'the quick brown fox'",
        "log_tail": {"rank0": "line one\nline two"},
        "ok": True,
    }
    viewed = redact_text(attributes)
    assert {k: viewed[k] for k in ("failure_class", "rank", "loss", "path", "ok")} == {
        k: attributes[k] for k in ("failure_class", "rank", "loss", "path", "ok")
    }
    assert viewed["message"] == f"<redacted: {len(attributes['message'])} chars>"
    assert viewed["log_tail"]["rank0"].startswith("<redacted: ")


def test_an_operator_sees_text_a_viewer_does_not_and_neither_sees_secrets():
    event = {"seq": 1, "type": "FAILURE_CLASSIFIED",
             "attributes": {"message": "printed hf_abcdefgh while failing"}}  # fmt: skip
    for role, shown in ((Role.VIEWER, False), (Role.OPERATOR, True)):
        actor = Actor(name="u", via="api", project="p", role=role)
        disclosure = Disclosure(
            sample_text=actor.may(Permission.READ_SAMPLE_TEXT), secrets=secret_values(SPEC)
        )
        message = event_view(event, disclosure)["attributes"]["message"]
        assert "hf_abcdefgh" not in message
        assert (message == f"printed {MASK} while failing") is shown
