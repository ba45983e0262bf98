"""Sandbox uids: every pool or backend of a process gets uids no other one of it has (per-uid
kernel limits such as RLIMIT_NPROC would otherwise be shared between two sessions)."""

from sandbox.isolation.backends.base import allocate_uids


def test_pools_of_one_process_never_share_a_uid():
    seen: set[int] = set()
    for count in [17] * 400 + [2_500]:  # 400 random blocks collide at once if drawn blindly
        uids = allocate_uids(count)
        assert len(set(uids)) == count and not seen & set(uids)
        assert min(uids) >= 200_000
        seen |= set(uids)
