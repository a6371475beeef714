#!/usr/bin/python3
"""The Python SDK's initiator client against a running tccd with two bank
participants (run by mixed_test.cc): a transfer that confirms, one the bank
refuses (cancelled), a retry with another created_at_ms (the same
transaction: the first created_at_ms stands, the answer is a duplicate),
the same gid with other content (ALREADY_EXISTS, nothing changed), an
unknown gid (NOT_FOUND), wait() on an accepted one, the hashes tccd reports
against the SDK's. Prints "py-client: ok" and exits 0, or says what broke."""

import argparse
import sys

from tcc.v1 import coordinator_pb2 as cpb
from tcc_participant.client import Branch, CoordinatorClient, new_gid
from tcc_participant.hashes import branch_hash, submission_hash
from tcc_participant.status import CallError, Code


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tccd", required=True)
    ap.add_argument("--bank-a", required=True)
    ap.add_argument("--bank-b", required=True)
    args = ap.parse_args()
    c = CoordinatorClient(args.tccd, attempt_timeout_s=20)

    def transfer(amount, src=1, dst=2):
        return [Branch("debit", args.bank_a, "debit", f"{src}:{amount}".encode()),
                Branch("credit", args.bank_b, "credit", f"{dst}:{amount}".encode())]

    def check(cond, why):
        if not cond:
            print(f"py-client: FAIL: {why}", flush=True)
            sys.exit(1)

    view = c.submit(transfer(25), revision=3)
    check(view.state == cpb.TXN_STATE_CONFIRMED, f"a transfer: {view}")
    branches = [(b, p, a, pl) for b, p, a, pl in
                (("debit", args.bank_a, "debit", b"1:25"), ("credit", args.bank_b, "credit", b"2:25"))]
    check(view.content_hash == submission_hash(3, False, branches),
          "tccd's content hash is not the SDK's")
    by_id = {b.branch_id: b for b in view.branches}
    check(by_id["debit"].branch_hash == branch_hash(3, args.bank_a, "debit", b"1:25"),
          "tccd's branch hash is not the SDK's")

    refused = c.submit(transfer(10 ** 9))
    check(refused.state == cpb.TXN_STATE_CANCELLED, f"a refused transfer: {refused}")

    gid = new_gid()
    first = cpb.SubmitRequest(gid=gid, created_at_ms=0, wait_for=cpb.WAIT_FOR_FINISHED,
                              branches=[cpb.BranchSpec(branch_id=b.branch_id,
                                                       participant=b.participant,
                                                       action=b.action, payload=b.payload)
                                        for b in transfer(5, 3, 4)])
    r1 = c.submit_request(first)
    check(r1.transaction.state == cpb.TXN_STATE_CONFIRMED and not r1.duplicate, f"{r1}")
    again = cpb.SubmitRequest()
    again.CopyFrom(first)
    again.created_at_ms = first.created_at_ms + 1234
    r2 = c.submit_request(again)
    check(r2.duplicate, "a retry with another created_at_ms is not a duplicate")
    check(r2.transaction.created_at_ms == first.created_at_ms,
          f"the first created_at_ms does not stand: {r2.transaction.created_at_ms}")
    other = cpb.SubmitRequest()
    other.CopyFrom(first)
    other.branches[0].payload = b"3:6"
    try:
        c.submit_request(other)
        check(False, "the same gid with other content was accepted")
    except CallError as e:
        check(e.code == Code.ALREADY_EXISTS, f"other content: {e}")

    try:
        c.get("g-never-submitted")
        check(False, "an unknown gid was found")
    except CallError as e:
        check(e.code == Code.NOT_FOUND, f"unknown gid: {e}")

    accepted = c.submit(transfer(7, 5, 6), wait_for=cpb.WAIT_FOR_ACCEPTED)
    done = c.wait(accepted.gid, timeout_s=30)
    check(done.state == cpb.TXN_STATE_CONFIRMED, f"wait: {done}")
    print("py-client: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
