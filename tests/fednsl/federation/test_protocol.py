from fednsl.federation import protocol as P


def test_complete_when_all_reply_sorted():
    s, acts = P.start(1, "train", ("b", "a"), 2)
    assert acts == (P.Broadcast(1, "train", ("b", "a")),)
    s, _ = P.step(s, P.Reply("b", 1, "train"))
    s, acts = P.step(s, P.Reply("a", 1, "train"))
    assert s.status == "complete" and acts[-1] == P.Aggregate(1, "train", ("a", "b"))


def test_stale_duplicate_and_unsampled_replies_discarded():
    s, _ = P.start(2, "train", ("a", "b"), 1)
    s, acts = P.step(s, P.Reply("a", 1, "train"))  # previous round's reply
    assert isinstance(acts[0], P.Discard) and s.accepted == ()
    s, acts = P.step(s, P.Reply("a", 2, "evaluate"))  # another stage
    assert isinstance(acts[0], P.Discard)
    s, acts = P.step(s, P.Reply("z", 2, "train"))
    assert isinstance(acts[0], P.Discard)
    s, _ = P.step(s, P.Reply("a", 2, "train"))
    s, acts = P.step(s, P.Reply("a", 2, "train"))
    assert isinstance(acts[0], P.Discard) and s.accepted == ("a",)


def test_failure_then_quorum_loss_aborts():
    s, _ = P.start(1, "train", ("a", "b", "c"), 2)
    s, _ = P.step(s, P.Failure("a", 1, "train", "boom"))
    s, _ = P.step(s, P.Reply("b", 1, "train"))
    s, acts = P.step(s, P.Failure("c", 1, "train", "boom"))
    assert s.status == "aborted" and isinstance(acts[-1], P.Abort)


def test_timeout_completes_with_quorum_and_drops_pending():
    s, _ = P.start(1, "train", ("a", "b", "c"), 2)
    s, _ = P.step(s, P.Reply("a", 1, "train"))
    s, _ = P.step(s, P.Reply("c", 1, "train"))
    s, acts = P.step(s, P.Timeout(0, "train"))  # stale timer ignored
    assert acts == () and s.status == "waiting"
    s, acts = P.step(s, P.Timeout(1, "train"))
    assert s.status == "complete" and P.Drop("b", "timed out") in acts
    assert acts[-1] == P.Aggregate(1, "train", ("a", "c"))
    s, acts = P.step(s, P.Reply("b", 1, "train"))  # late reply after completion
    assert isinstance(acts[0], P.Discard)


def test_too_few_sampled_aborts_at_start():
    s, acts = P.start(1, "train", ("a",), 2)
    assert s.status == "aborted" and isinstance(acts[0], P.Abort)
