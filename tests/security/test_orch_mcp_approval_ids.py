"""Issue 32, finding 14: the signed approval request id, on its own (`orchestrator.guard.approvals`)."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from orchestrator.guard import approvals
from toolkit.wire import sign_owner

SECRET = b"k" * 32
FIELDS = st.tuples(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20), st.text(max_size=60))


@given(FIELDS)
def test_an_issued_id_holds_for_its_own_fields(fields: tuple[str, str, str]) -> None:
    approval_id = approvals.issue(*fields, secret=SECRET)
    assert approval_id.startswith("mcpr_") and approvals.issued(approval_id, *fields, secret=SECRET)


@given(FIELDS, st.integers(0, 3), st.data())
def test_an_issued_id_with_any_field_changed_does_not_hold(
    fields: tuple[str, str, str], which: int, data: st.DataObject
) -> None:
    approval_id = approvals.issue(*fields, secret=SECRET)
    values = [approval_id, *fields]
    changed = data.draw(st.text(max_size=80))
    assume(changed != values[which])
    values[which] = changed
    assert not approvals.issued(*values, secret=SECRET)


@given(FIELDS)
def test_another_fleets_secret_does_not_hold(fields: tuple[str, str, str]) -> None:
    assert not approvals.issued(approvals.issue(*fields, secret=b"other" * 8), *fields, secret=SECRET)


def test_no_other_signed_value_of_the_fleet_passes_for_an_approval() -> None:
    """The owner header is signed with the same secret: its MAC, in an id's place, is not an approval's."""
    mac = sign_owner("owner1", SECRET).partition(".")[2]
    assert not approvals.issued("mcpr_" + "0" * 32 + mac, "owner1", "x", "", secret=SECRET)
