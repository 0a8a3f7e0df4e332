"""Trajectories as span trees: a realistic multi-turn agent loop, sync and async, read back from Parquet."""

from __future__ import annotations

import asyncio
import json
import math
import threading

import duckdb
import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.records.trace import checkpoint_open_spans, configure, current_span, latest_rows, traced


def read_spans(run) -> list[dict]:
    rows = sorted(pq.read_table(run.dir / "spans").to_pylist(), key=lambda r: r["seq"])
    return latest_rows(rows)


def tree(rows: list[dict], trace_id: str) -> list[tuple]:
    """(depth, name, kind, status) in start order, for one trace."""
    mine = [r for r in rows if r["trace_id"] == trace_id]
    by_parent: dict = {}
    for r in mine:
        by_parent.setdefault(r["parent_span_id"], []).append(r)
    out: list[tuple] = []

    def walk(parent, depth):
        for r in sorted(by_parent.get(parent, []), key=lambda r: (r["start_ns"], r["seq"])):
            out.append((depth, r["name"], r["kind"], r["status"]))
            walk(r["span_id"], depth + 1)

    walk(None, 0)
    return out


# ---------------------------------------------------------------------- a tiny agent
TOOLS = {"calculator": lambda expr: str(eval(expr, {"__builtins__": {}}))}  # noqa: S307 - test-only, fixed input


@traced(kind="llm")
def generate(messages: list[dict], temperature: float = 1.0) -> dict:
    last = messages[-1]
    if last["role"] == "user":
        call = {"name": "calculator", "arguments": {"expr": "6*7"}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}
    return {"role": "assistant", "content": f"The answer is {last['content']}."}


@traced(kind="tool")
def run_tool(name: str, arguments: dict) -> str:
    return TOOLS[name](**arguments)


@traced(kind="reward", name="reward_fn")
def compute_reward(answer: str, ground_truth: str) -> float:
    return 1.0 if ground_truth in answer else 0.0


def agent_episode(run, sample_index: int, question: str) -> None:
    with run.trace(step=5, sample_index=sample_index, rollout_n=0, validate=False, data_source="gsm8k") as tr:
        messages = [{"role": "user", "content": question}]
        with tr.span("user_turn", kind="other", inputs=messages[0]):
            pass
        for turn in range(4):
            with tr.span(f"assistant_turn_{turn}", kind="agent", attributes={"turn": turn}) as s:
                reply = generate(messages, temperature=0.7)
                messages.append(reply)
                for call in reply.get("tool_calls", []):
                    result = run_tool(call["name"], call["arguments"])
                    messages.append({"role": "tool", "name": call["name"], "content": result})
                s.set_outputs(reply)
            if not reply.get("tool_calls"):
                break
        tr.set_reward(compute_reward(messages[-1]["content"], "42"))
        tr.set_outputs(messages)


def test_multi_turn_agent_loop(root):
    run = trackstore.init("p", root=root)
    agent_episode(run, 3, "What is 6*7?")
    run.finish()
    rows = read_spans(run)
    assert len({r["trace_id"] for r in rows}) == 1
    tid = rows[0]["trace_id"]
    assert tree(rows, tid) == [
        (0, "episode", "agent", "ok"),
        (1, "user_turn", "other", "ok"),
        (1, "assistant_turn_0", "agent", "ok"),
        (2, "generate", "llm", "ok"),
        (2, "run_tool", "tool", "ok"),
        (1, "assistant_turn_1", "agent", "ok"),
        (2, "generate", "llm", "ok"),
        (1, "reward_fn", "reward", "ok"),
    ]
    root_row = next(r for r in rows if r["parent_span_id"] is None)
    assert root_row["reward"] == 1.0 and root_row["step"] == 5 and root_row["sample_index"] == 3
    assert root_row["rollout_n"] == 0 and root_row["validate"] is False
    assert json.loads(root_row["attributes"]) == {"data_source": "gsm8k"}
    final = json.loads(root_row["outputs"])
    assert [m["role"] for m in final] == ["user", "assistant", "tool", "assistant"]
    assert final[-1]["content"] == "The answer is 42."
    tool = next(r for r in rows if r["name"] == "run_tool")
    assert json.loads(tool["inputs"]) == {"name": "calculator", "arguments": {"expr": "6*7"}}
    assert json.loads(tool["outputs"]) == "42"
    gen = next(r for r in rows if r["name"] == "generate")
    assert json.loads(gen["inputs"])["temperature"] == 0.7
    assert all(r["step"] == 5 and r["sample_index"] == 3 for r in rows)  # trace fields on every span
    assert all(r["end_ns"] >= r["start_ns"] > 1_600_000_000 * 10**9 for r in rows)
    assert all(r["reward"] is None for r in rows if r["parent_span_id"] is not None)


async def _async_episode(run, i: int, delays: list[float]) -> str:
    @traced(kind="llm")
    async def agenerate(prompt: str) -> str:
        await asyncio.sleep(delays[0])
        return f"call tool for {prompt}"

    @traced(kind="tool")
    async def atool(query: str) -> str:
        await asyncio.sleep(delays[1])
        return f"result[{query}]"

    @traced(kind="reward")
    async def areward(answer: str, ground_truth: str) -> float:
        await asyncio.sleep(delays[0])  # e.g. a remote reward model
        return float(i) if ground_truth in answer else -1.0

    async with run.trace(step=1, sample_index=i, rollout_n=i % 2) as tr:
        with tr.span("user_turn", kind="other", inputs={"role": "user", "content": f"q{i}"}) as s:
            await asyncio.sleep(delays[1])  # the other trajectories run meanwhile
            s.set_outputs({"accepted": True})
        with tr.span("assistant", kind="agent") as s:
            await agenerate(f"q{i}")
            res = await atool(f"q{i}")
            answer = await agenerate(res)
            s.set_outputs(answer)
        tr.set_reward(await areward(answer, f"q{i}"))
        return tr.trace_id


def test_async_trajectories_do_not_mix(root):
    run = trackstore.init("p", root=root)
    n = 8

    async def main():
        # different delays per trajectory so their spans interleave in time
        return await asyncio.gather(*(_async_episode(run, i, [0.001 * ((i * 3) % 5), 0.001 * ((i * 7) % 4)])
                                      for i in range(n)))

    trace_ids = asyncio.run(main())
    run.finish()
    rows = read_spans(run)
    assert len(set(trace_ids)) == n and {r["trace_id"] for r in rows} == set(trace_ids)
    by_id = {r["span_id"]: r for r in rows}
    for i, tid in enumerate(trace_ids):
        assert tree(rows, tid) == [(0, "episode", "agent", "ok"), (1, "user_turn", "other", "ok"),
                                   (1, "assistant", "agent", "ok"),
                                   (2, "_async_episode.<locals>.agenerate", "llm", "ok"),
                                   (2, "_async_episode.<locals>.atool", "tool", "ok"),
                                   (2, "_async_episode.<locals>.agenerate", "llm", "ok"),
                                   (1, "_async_episode.<locals>.areward", "reward", "ok")]
        mine = [r for r in rows if r["trace_id"] == tid]
        assert all(r["sample_index"] == i for r in mine)
        for r in mine:  # every parent is in the same trace, and inputs belong to this trajectory
            if r["parent_span_id"]:
                assert by_id[r["parent_span_id"]]["trace_id"] == tid
            if r["inputs"] and r["kind"] != "agent":
                assert f"q{i}" in r["inputs"]
        named = {r["name"].rsplit(".", 1)[-1]: r for r in mine}
        assert json.loads(named["user_turn"]["inputs"]) == {"role": "user", "content": f"q{i}"}
        assert json.loads(named["user_turn"]["outputs"]) == {"accepted": True}
        assert json.loads(named["areward"]["inputs"]) == {"answer": f"call tool for result[q{i}]",
                                                          "ground_truth": f"q{i}"}
        assert json.loads(named["areward"]["outputs"]) == float(i)
        assert named["user_turn"]["end_ns"] <= named["assistant"]["start_ns"]
        assert named["assistant"]["end_ns"] <= named["areward"]["start_ns"]
        assert next(r for r in mine if r["parent_span_id"] is None)["reward"] == float(i)


def test_validate_flag_roundtrips(root):
    run = trackstore.init("p", root=root)
    with run.trace(step=3, sample_index=0, validate=True) as tr:
        with tr.span("gen", kind="llm"):
            pass
        tr.set_reward(1.0)
    with run.trace(step=3, sample_index=1) as tr:  # a training rollout: validate defaults to False
        with tr.span("gen", kind="llm"):
            pass
    with pytest.raises(ValueError, match="validate"):
        run.trace(step=3, validate="yes")
    run.finish()
    rows = read_spans(run)
    assert len(rows) == 4
    assert {(r["sample_index"], r["name"], r["validate"]) for r in rows} == {
        (0, "episode", True), (0, "gen", True), (1, "episode", False), (1, "gen", False)}  # on every span
    assert all(type(r["validate"]) is bool for r in rows)
    con = trackstore.connect(root)
    got = con.execute("SELECT sample_index, count(*), bool_and(validate) FROM spans WHERE validate GROUP BY ALL"
                      ).fetchall()
    assert got == [(0, 2, True)]
    assert con.execute("SELECT reward FROM spans WHERE validate AND parent_span_id IS NULL").fetchall() == [(1.0,)]
    assert con.execute("SELECT count(*) FROM spans WHERE NOT validate").fetchone() == (2,)


def test_threads_do_not_mix(root):
    run = trackstore.init("p", root=root)
    barrier = threading.Barrier(4)

    @traced(kind="tool")
    def work(i):
        barrier.wait(timeout=10)
        return current_span().trace.sample_index

    results = {}

    def worker(i):
        with run.trace(step=0, sample_index=i):
            results[i] = work(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.finish()
    assert results == {i: i for i in range(4)}
    rows = read_spans(run)
    for r in rows:
        if r["name"] == "test_threads_do_not_mix.<locals>.work":
            assert json.loads(r["inputs"]) == {"i": r["sample_index"]}


def test_errors_are_recorded_and_reraised(root):
    run = trackstore.init("p", root=root)

    @traced(kind="tool")
    def broken(x):
        raise KeyError(f"no tool {x}")

    with pytest.raises(KeyError):
        with run.trace(step=0) as tr:
            with tr.span("assistant", kind="llm") as s:
                s.set_outputs("calling")
            broken("search")
    run.finish()
    rows = read_spans(run)
    st = {r["name"]: (r["status"], r["error"]) for r in rows}
    assert st["assistant"] == ("ok", None)
    assert st["test_errors_are_recorded_and_reraised.<locals>.broken"] == ("error", "KeyError: 'no tool search'")
    assert st["episode"] == ("error", "KeyError: 'no tool search'")


def test_traced_outside_a_trace_runs_untouched(root):
    run = trackstore.init("p", root=root)

    @traced
    def plain(x):
        return x + 1

    assert plain(1) == 2 and plain.__name__ == "plain"
    with run.trace(step=0) as tr:
        @tr.traced(kind="reward")
        def scored(x):
            return x * 2

        assert scored(2) == 4
    assert scored(3) == 6  # bound to a trace that has ended: runs plainly, nothing recorded
    run.finish()
    names = [r["name"] for r in read_spans(run)]
    assert names.count("test_traced_outside_a_trace_runs_untouched.<locals>.scored") == 1
    assert not any(n.endswith("plain") for n in names)


def test_values_roundtrip_unicode_large_nested_nan(root):
    big = "长文本 ✓ " * 150_000
    run = trackstore.init("p", root=root)
    with run.trace(step=2) as tr:
        with tr.span("llm", kind="llm", inputs={"messages": [{"role": "user", "content": big}], "empty": []},
                     attributes={"nan": float("nan"), "emoji": "🤖"}) as s:
            s.set_outputs({"text": big[::-1], "logprobs": [float("nan"), -1.5], "nested": {"a": [[], {}]}})
        tr.set_reward(float("nan"))
    run.finish()
    rows = read_spans(run)
    span = next(r for r in rows if r["name"] == "llm")
    assert json.loads(span["inputs"]) == {"messages": [{"role": "user", "content": big}], "empty": []}
    out = json.loads(span["outputs"])
    assert out["text"] == big[::-1] and math.isnan(out["logprobs"][0]) and out["nested"] == {"a": [[], {}]}
    attrs = json.loads(span["attributes"])
    assert math.isnan(attrs["nan"]) and attrs["emoji"] == "🤖"
    assert math.isnan(next(r for r in rows if r["parent_span_id"] is None)["reward"])
    # DuckDB reads the same JSON (NaN included)
    con = duckdb.connect()
    got = con.execute("SELECT length(json_extract_string(outputs, '$.text')), json_extract(outputs, '$.logprobs[1]') "
                      "FROM read_parquet(?) WHERE name = 'llm'", [str(run.dir / "spans" / "*.parquet")]).fetchone()
    assert got[0] == len(big) and float(got[1]) == -1.5


class CharTokenizer:
    """A tiny tokenizer built in the test: ids are code points, 0 is a special token."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == 0))


def test_token2text(root):
    run = trackstore.init("p", root=root)
    configure(run, token2text=CharTokenizer())

    @traced(kind="llm")
    def llm_generate(prompt_ids, sampling_params):
        return {"prompt_ids": prompt_ids, "response_ids": [ord(c) for c in "ok!"] + [0], "token_ids": "not ids"}

    with run.trace(step=0):
        llm_generate([ord(c) for c in "hi"], {"temperature": 1})
    run.finish()
    span = next(r for r in read_spans(run) if r["kind"] == "llm")
    inputs, outputs = json.loads(span["inputs"]), json.loads(span["outputs"])
    assert inputs["prompt_text"] == "hi" and outputs["prompt_text"] == "hi" and outputs["response_text"] == "ok!"
    assert "token_text" not in outputs  # not a list of ints: left alone


def test_sampler_bounded_and_deterministic_by_seed(root):
    def kept(seed: int, order: list[int]) -> set:
        run = trackstore.init("p", root=root)
        settings = configure(run, max_samples_per_step=3, seed=seed)
        planned = settings.sampler.plan(7, range(10))
        for i in order:
            for n in range(2):  # two rollouts per prompt: both kept or both dropped
                with run.trace(step=7, sample_index=i, rollout_n=n) as tr:
                    with tr.span("gen", kind="llm"):
                        pass
        run.finish()
        rows = read_spans(run)
        got = {r["sample_index"] for r in rows}
        assert got == planned and len(rows) == len(got) * 2 * 2  # root + gen, two rollouts each
        return got

    a = kept(1, list(range(10)))
    assert len(a) == 3
    assert kept(1, list(reversed(range(10)))) == a  # order does not matter
    others = {frozenset(kept(s, list(range(10)))) for s in range(2, 8)}
    assert len(others | {frozenset(a)}) > 1  # the seed does


def test_sampler_without_plan_keeps_first_n(root):
    run = trackstore.init("p", root=root)
    configure(run, max_samples_per_step=2)

    @traced(kind="tool")
    def tool():
        return 1

    for step in (0, 1):
        for i in range(5):
            with run.trace(step=step, sample_index=i) as tr:
                tool()
                assert tr.recording == (i < 2)
    run.finish()
    rows = read_spans(run)
    assert sorted({(r["step"], r["sample_index"]) for r in rows}) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_open_spans_are_checkpointed_and_replaced_by_final_row(root):
    run = trackstore.init("p", root=root)
    with run.trace(step=0) as tr:
        with tr.span("slow_tool", kind="tool", inputs={"q": 1}) as s:
            assert checkpoint_open_spans(run) == 2  # root and slow_tool
            run.flush()
            s.set_outputs("done")
    run.finish()
    raw = sorted(pq.read_table(run.dir / "spans").to_pylist(), key=lambda r: r["seq"])
    assert [(r["name"], r["status"]) for r in raw] == [("episode", "unfinished"), ("slow_tool", "unfinished"),
                                                       ("slow_tool", "ok"), ("episode", "ok")]
    assert raw[1]["inputs"] == '{"q":1}' and raw[1]["end_ns"] is None and raw[1]["outputs"] is None
    rows = latest_rows(raw)
    assert [(r["name"], r["status"], r["outputs"]) for r in rows] == [("episode", "ok", None),
                                                                     ("slow_tool", "ok", '"done"')]


def test_bad_arguments(root):
    run = trackstore.init("p", root=root)
    with pytest.raises(ValueError, match="kind"):
        traced(kind="function")
    with run.trace(step=0) as tr:
        with pytest.raises(ValueError, match="kind"):
            tr.span("x", kind="LLM")
        with pytest.raises(ValueError, match="name"):
            tr.span("")
    with pytest.raises(ValueError, match="sample_index"):
        run.trace(sample_index="abc")
    with pytest.raises(ValueError, match="max_samples_per_step"):
        configure(run, max_samples_per_step=-1)
    run.finish()
    with pytest.raises(trackstore.UsageError, match="finished"):
        run.trace(step=1)


def test_methods_dataclasses_models_and_numpy(root):
    np = pytest.importorskip("numpy")
    import dataclasses

    @dataclasses.dataclass
    class ToolResult:
        ok: bool
        rows: list

    class Reply:  # shaped like a pydantic model: dumped with model_dump()
        def model_dump(self):
            return {"text": "hi", "logprobs": [-0.1]}

    class Agent:
        @traced(kind="tool")
        def lookup(self, key, *, limit=2):
            return ToolResult(True, [key] * limit)

        @traced(kind="llm")
        async def reply(self, prompt_ids):
            return Reply()

    run = trackstore.init("p", root=root)
    agent = Agent()
    with run.trace(step=0):
        agent.lookup("k", limit=3)
        asyncio.run(agent.reply(np.array([1, 2, 3])))  # a nested event loop copies the context
    run.finish()
    rows = {r["name"].rsplit(".", 1)[-1]: r for r in read_spans(run)}
    assert json.loads(rows["lookup"]["inputs"]) == {"key": "k", "limit": 3}
    assert json.loads(rows["lookup"]["outputs"]) == {"ok": True, "rows": ["k", "k", "k"]}
    assert json.loads(rows["reply"]["inputs"]) == {"prompt_ids": [1, 2, 3]}
    assert json.loads(rows["reply"]["outputs"]) == {"text": "hi", "logprobs": [-0.1]}
    assert rows["reply"]["parent_span_id"] == rows["episode"]["span_id"]


def test_manual_start_and_end(root):
    run = trackstore.init("p", root=root)
    tr = run.trace(step=1, sample_index=0).start()
    s = tr.span("tool", kind="tool", inputs={"q": 1}).start()
    s.set_outputs("r").end()
    tr.end(status="error", error="timeout")
    run.finish()
    rows = {r["name"]: r for r in read_spans(run)}
    assert rows["tool"]["status"] == "ok" and rows["tool"]["parent_span_id"] == rows["episode"]["span_id"]
    assert (rows["episode"]["status"], rows["episode"]["error"]) == ("error", "timeout")
    ep, tool = rows["episode"], rows["tool"]
    assert ep["start_ns"] <= tool["start_ns"] <= tool["end_ns"] <= ep["end_ns"]


def test_spans_of_a_trace_never_entered_are_not_orphans(root):
    run = trackstore.init("p", root=root)
    tr = run.trace(step=0)  # the caller forgot `with`
    with tr.span("gen", kind="llm"):
        pass
    run.finish()
    rows = {r["name"]: r for r in read_spans(run)}
    assert rows["gen"]["parent_span_id"] == rows["episode"]["span_id"]
    assert rows["episode"]["status"] == "unfinished"  # never ended: kept, and visibly so


WORKER = """
import asyncio, sys, trackstore
from trackstore.records.trace import traced
run = trackstore.init("p", root=sys.argv[1], run_id="shared", resume=True)
w = int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()  # all workers write their spans at the same time

@traced(kind="llm")
async def generate(prompt):
    await asyncio.sleep(0.001 * (hash(prompt) % 5))
    return prompt.upper()

async def episode(i):
    async with run.trace(step=1, sample_index=w * 10 + i, worker=w) as tr:
        await generate(f"w{w}-{i}")
        tr.set_reward(i)

async def main():
    await asyncio.gather(*(episode(i) for i in range(5)))

asyncio.run(main())
run.finish()
"""


def test_several_worker_processes_one_run_queried_with_sql(root):
    import subprocess
    import sys

    trackstore.init("p", root=root, run_id="shared").finish()
    procs = []
    for w in range(3):  # started one after the other (concurrent resume of one run is run.py's business)
        p = subprocess.Popen([sys.executable, "-c", WORKER, str(root), str(w)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        procs.append(p)
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    con = trackstore.connect(root)
    rows = con.execute(
        "SELECT root.sample_index, root.reward, count(c.span_id), count(DISTINCT c.writer), "
        "any_value(json_extract_string(c.outputs, '$')) "
        "FROM spans root JOIN spans c ON c.trace_id = root.trace_id AND c.parent_span_id = root.span_id "
        "WHERE root.parent_span_id IS NULL GROUP BY ALL ORDER BY 1").fetchall()
    expected = [(w * 10 + i, float(i), 1, 1) for w in range(3) for i in range(5)]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == expected
    assert [r[4] for r in rows] == [f"W{w}-{i}" for w in range(3) for i in range(5)]
    writers = con.execute("SELECT count(DISTINCT writer) FROM spans").fetchone()[0]
    assert writers == 3
