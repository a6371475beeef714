"""The canonical encodings against the fixed vectors of
proto/tcc/v1/content_hash_vectors.json (the same file the C++ tests and the
conformance suite read)."""

import json
import os
import unittest

from tcc_participant import hashes

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "proto", "tcc", "v1",
                       "content_hash_vectors.json")


class HashVectors(unittest.TestCase):
    def setUp(self):
        with open(VECTORS) as f:
            self.v = json.load(f)

    def test_branch(self):
        self.assertGreaterEqual(len(self.v["branch"]), 3)
        for b in self.v["branch"]:
            args = (b["revision"], bytes.fromhex(b["participant_hex"]),
                    bytes.fromhex(b["action_hex"]), bytes.fromhex(b["payload_hex"]))
            self.assertEqual(hashes.canonical_branch_encoding(*args).hex(), b["encoding_hex"])
            self.assertEqual(hashes.branch_hash(*args).hex(), b["sha256_hex"])

    def test_submission(self):
        for s in self.v["submission"]:
            branches = [tuple(bytes.fromhex(x[k]) for k in
                              ("branch_id_hex", "participant_hex", "action_hex", "payload_hex"))
                        for x in s["branches"]]
            self.assertEqual(
                hashes.canonical_submission_encoding(s["revision"], s["approval_gate"],
                                                     branches).hex(), s["encoding_hex"])
            self.assertEqual(hashes.submission_hash(s["revision"], s["approval_gate"],
                                                    list(reversed(branches))).hex(),
                             s["sha256_hex"])

    def test_str_is_utf8(self):
        self.assertEqual(hashes.branch_hash(1, "p", "a", "x"), hashes.branch_hash(1, b"p", b"a", b"x"))
        self.assertNotEqual(hashes.branch_hash(1, "ab", "c", ""), hashes.branch_hash(1, "a", "bc", ""))


if __name__ == "__main__":
    unittest.main()
