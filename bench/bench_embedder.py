"""Compare the embedder backends: agreement with the reference, latency, throughput.

    python bench/bench_embedder.py [--data-dir DIR] [--queries 200] [--corpus 300]

Prints a markdown section (nothing is written): for torch (the sentence-transformers
reference), ONNX fp32 and ONNX int8 —

* cosine of each corpus sentence's vector to the reference vector (mean / min);
* top-10 neighbour overlap with the reference: for each query the 10 nearest corpus
  sentences, and for each corpus sentence its 10 nearest others;
* latency of one query (batch of 1) p50 / p95, and throughput with batches of 64;
* time from a new process to its first vector (ONNX cache already built), and the time to
  build the ONNX files on a first start (empty cache).

and the default the numbers select (see ``choose_default``).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from memoryhub import embeddings as E  # noqa: E402

# ---------------------------------------------------------------- corpus

FACTS = [
    "The Wi-Fi password for the guest network is written on the fridge.",
    "My passport expires in March 2027, renew it before travelling.",
    "Blood pressure was 128 over 82 at the last check-up.",
    "The production database is backed up every night at 2am UTC.",
    "Postgres connection pooling is handled by pgbouncer in transaction mode.",
    "The cat needs her flea treatment on the first of every month.",
    "I am allergic to penicillin.",
    "Our team uses trunk-based development with short-lived feature branches.",
    "The garage door code was changed to 4821 in June.",
    "Favourite coffee order: oat flat white, no sugar.",
    "The deploy pipeline fails if the migration takes longer than five minutes.",
    "Tomatoes should be watered in the morning, not the evening.",
    "Car insurance renews automatically on 12 September.",
    "The kids' school starts at 8:15 and ends at 3:00.",
    "Use the staging cluster for load tests, never production.",
    "Mum's birthday is on the 14th of February.",
    "The recipe works better with brown butter and a pinch of salt.",
    "Python 3.11 is the minimum supported version for the service.",
    "The rental contract requires three months notice before moving out.",
    "We switched the electricity provider to a green tariff last spring.",
    "Running shoes should be replaced every 600 kilometres.",
    "The monthly budget for groceries is 450 euros.",
    "The VPN disconnects if the laptop sleeps for more than an hour.",
    "Our flight to Lisbon leaves at 7:40 from terminal 2.",
    "The rate limiter allows 100 requests per minute per token.",
    "The sourdough starter needs feeding twice a day in summer.",
    "Dr. Patel's clinic is closed on Wednesdays.",
    "The bike lock combination is the same as the old one.",
    "Embedding vectors are stored as 384-dimensional float arrays.",
    "I promised to review Jamie's pull request before Friday.",
    "The heating should be set to 19 degrees at night.",
    "Library books are due back on the 3rd.",
    "The on-call rotation changes every Monday at 10am.",
    "Avoid the ring road during rush hour, take the river route instead.",
    "The spare house key is with the neighbours at number 12.",
    "I'm learning Spanish with thirty minutes of practice every evening.",
    "The printer on the second floor only works with the blue cable.",
    "Weekly groceries are delivered on Saturday mornings.",
    "The monitoring dashboard alerts when p95 latency exceeds 300 ms.",
    "Dinner reservation for four on Friday at 8pm under my name.",
    "The customer asked for a refund because the parcel arrived damaged.",
    "Quarterly OKRs are reviewed in the first week of each quarter.",
    "Invoices must be paid within thirty days of receipt.",
    "The new hire starts on Monday and needs a laptop and a badge.",
    "Our support SLA promises a first response within four business hours.",
    "The office is closed between Christmas and New Year.",
    "Jenkins was replaced by GitHub Actions for all CI jobs last year.",
    "The dog is scared of fireworks; keep her inside on New Year's Eve.",
    "Use two-factor authentication for every admin account.",
    "The staging certificate expires at the end of the month.",
]
SUBJECTS = [
    "Alice",
    "Bob",
    "the design team",
    "our landlord",
    "the dentist",
    "Grandma",
    "the new intern",
    "the client from Berlin",
    "my manager",
    "the plumber",
    "Sam",
    "the book club",
]
TEMPLATES = [
    "Meeting with {s} moved to {d} at {t}.",
    "Remember to call {s} about the {x} on {d}.",
    "{S} said the {x} should be ready by {d}.",
    "Need to send {s} the invoice for the {x}.",
    "{S} prefers email over phone calls for anything about the {x}.",
    "Follow up with {s} if the {x} is still broken after {d}.",
    "{S} recommended a great Thai restaurant near the office.",
    "Ask {s} whether the {x} budget was approved.",
    "Notes from the call with {s}: the {x} is on hold until {d}.",
    "{S} will be on holiday {d}, so the {x} waits.",
]
THINGS = [
    "quarterly report",
    "kitchen renovation",
    "API migration",
    "birthday party",
    "tax return",
    "website redesign",
    "server upgrade",
    "wedding plans",
    "garden fence",
    "insurance claim",
    "conference talk",
    "car repair",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "next week", "the end of the month", "tomorrow"]
TIMES = ["9am", "10:30", "noon", "2pm", "3:15pm", "5pm"]
QUERIES = [
    "when is the meeting with Alice",
    "what is the wifi password",
    "am I allergic to any medicine",
    "how often is the database backed up",
    "when does my passport expire",
    "what coffee do I like",
    "who has the spare key",
    "when does the flight leave",
    "what's the grocery budget",
    "how many requests per minute are allowed",
    "when is mum's birthday",
    "what temperature for heating at night",
    "which python version do we need",
    "when is the car insurance renewal",
    "restaurant recommendation",
    "deploy pipeline migration timeout",
    "status of the kitchen renovation",
    "how do I get around traffic",
    "what is the garage code",
    "when should I water the tomatoes",
    "who is on holiday",
    "refund for damaged delivery",
    "how fast must support answer",
    "what does the new employee need",
    "which CI system do we use",
    "invoice payment terms",
    "tax return deadline",
    "is the server upgrade done",
    "call the plumber",
    "security for admin accounts",
]


def make_corpus(n: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    out = list(FACTS)
    seen = set(out)
    while len(out) < n:
        s = rng.choice(SUBJECTS)
        text = rng.choice(TEMPLATES).format(
            s=s, S=s[0].upper() + s[1:], d=rng.choice(DAYS), t=rng.choice(TIMES), x=rng.choice(THINGS)
        )
        if text not in seen:
            seen.add(text)
            out.append(text)
    rng.shuffle(out)
    return out[:n]


# ---------------------------------------------------------------- measurements


def topk(queries: np.ndarray, corpus: np.ndarray, k: int = 10, exclude_self: bool = False) -> np.ndarray:
    sims = queries @ corpus.T
    if exclude_self:
        np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1, kind="stable")[:, :k]


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean([len(set(x) & set(y)) / len(x) for x, y in zip(a, b, strict=True)]))


def latency_samples(embedder: E.Embedder, texts: list[str], n: int, offset: int) -> list[float]:
    times = []
    for i in range(n):
        text = texts[(offset + i) % len(texts)]
        t0 = time.perf_counter()
        embedder.embed([text])
        times.append((time.perf_counter() - t0) * 1000)
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def throughput_seconds(embedder: E.Embedder, texts: list[str], batch: int = 64) -> tuple[int, float]:
    t0 = time.perf_counter()
    done = 0
    for i in range(0, len(texts) - batch + 1, batch):
        embedder.embed(texts[i : i + batch])
        done += batch
    return done, time.perf_counter() - t0


COLD_START = """
import sys, time
sys.path.insert(0, {root!r})
from memoryhub import embeddings as E
emb = getattr(E, {cls!r})({args})
emb.embed_query("first query")
print("torch" in sys.modules)
"""


def cold_start(cls: str, data_dir: str | None) -> tuple[float, bool]:
    """Fresh interpreter → first vector, with the ONNX cache already prepared."""
    args = "" if cls == "MiniLMTorchEmbedder" else repr(data_dir) if data_dir else ""
    code = COLD_START.format(root=str(Path(__file__).resolve().parent.parent), cls=cls, args=args)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t0, out.strip().splitlines()[-1] == "True"


def choose_default(rows: dict[str, dict]) -> tuple[str, str]:
    """int8 only if its vectors agree closely *and* it buys a real speed-up; else ONNX fp32
    if it matches the reference; else torch."""
    fp32, int8 = rows["onnx-fp32"], rows["onnx-int8"]
    if (
        int8["cos_mean"] >= 0.99
        and int8["cos_min"] >= 0.98
        and int8["q_top10"] >= 0.95
        and int8["c_top10"] >= 0.95
        and int8["p50"] * 1.5 <= fp32["p50"]
    ):
        return "MiniLMOnnxInt8Embedder", "int8 agrees closely (cos ≥ 0.99, top-10 ≥ 0.95) and is ≥1.5× faster"
    if fp32["cos_min"] >= 0.999:
        why = (
            f"the same vectors as torch (min cosine {fp32['cos_min']:.4f}) with "
            f"{rows['torch']['p50'] / fp32['p50']:.1f}× lower one-query p50 latency; int8 is not worth "
            f"its different vectors (top-10 overlap {int8['q_top10']:.2f} / {int8['c_top10']:.2f}; "
            f"p50 {int8['p50']:.1f} ms vs fp32 {fp32['p50']:.1f} ms)"
        )
        return "MiniLMOnnxEmbedder", why
    return "MiniLMTorchEmbedder", "ONNX fp32 does not reproduce the reference vectors"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help="cache folder (default: the configured one)")
    ap.add_argument("--corpus", type=int, default=300)
    ap.add_argument("--queries", type=int, default=200, help="single-query latency samples per backend")
    ap.add_argument("--no-cold", action="store_true", help="skip timing an export into an empty cache")
    args = ap.parse_args()

    corpus = make_corpus(args.corpus)
    queries = QUERIES
    lat_texts = queries + corpus

    cold: dict[str, float] = {}
    if not args.no_cold:
        with tempfile.TemporaryDirectory(prefix="embed-bench-") as tmp:
            t0 = time.perf_counter()
            E.prepare_onnx_model("fp32", tmp)
            cold["fp32"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            E.prepare_onnx_model("int8", tmp)
            cold["int8"] = time.perf_counter() - t0
    for variant in ("fp32", "int8"):
        E.prepare_onnx_model(variant, args.data_dir)

    backends: dict[str, Callable[[], E.Embedder]] = {
        "torch": E.MiniLMTorchEmbedder,
        "onnx-fp32": lambda: E.MiniLMOnnxEmbedder(args.data_dir),
        "onnx-int8": lambda: E.MiniLMOnnxInt8Embedder(args.data_dir),
    }
    rows: dict[str, dict] = {}
    live: dict[str, E.Embedder] = {}
    ref: tuple[np.ndarray, np.ndarray] | None = None
    for label, factory in backends.items():
        emb = live[label] = factory()
        vc = np.asarray(emb.embed(corpus), dtype=np.float32)
        vq = np.asarray(emb.embed(queries), dtype=np.float32)
        if ref is None:
            ref = (vc, vq)
        ref_c, ref_q = ref
        cos = (vc * ref_c).sum(axis=1)
        rows[label] = {
            "name": emb.name,
            "cos_mean": float(cos.mean()),
            "cos_min": float(cos.min()),
            "q_top10": overlap(topk(vq, vc), topk(ref_q, ref_c)),
            "c_top10": overlap(topk(vc, vc, exclude_self=True), topk(ref_c, ref_c, exclude_self=True)),
        }

    # Timings run in interleaved blocks so that a load change on the machine hits every
    # backend alike rather than whichever happened to be measured at that moment.
    blocks = 4
    lat: dict[str, list[float]] = {label: [] for label in live}
    done: dict[str, list[float]] = {label: [0, 0.0] for label in live}
    for emb in live.values():
        latency_samples(emb, lat_texts, 10, 0)  # warm-up
    for b in range(blocks):
        for label, emb in live.items():
            lat[label] += latency_samples(emb, lat_texts, max(1, args.queries // blocks), b * 50)
            n, secs = throughput_seconds(emb, corpus)
            done[label][0] += n
            done[label][1] += secs
    for label, cls in (
        ("torch", "MiniLMTorchEmbedder"),
        ("onnx-fp32", "MiniLMOnnxEmbedder"),
        ("onnx-int8", "MiniLMOnnxInt8Embedder"),
    ):
        rows[label]["cold"], rows[label]["imports_torch"] = cold_start(cls, args.data_dir)
    for label in live:
        rows[label]["p50"] = statistics.median(lat[label])
        rows[label]["p95"] = percentile(lat[label], 0.95)
        rows[label]["thr"] = done[label][0] / done[label][1]
    live.clear()

    import onnxruntime
    import torch

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print("## Embedder (all-MiniLM-L6-v2, 384-d)\n")
    print(
        f"{cpus} CPU cores ({platform.machine()}), torch {torch.__version__}, onnxruntime "
        f"{onnxruntime.__version__}, {len(corpus)} corpus sentences, {len(queries)} queries, "
        f"{args.queries} single-query samples; onnxruntime intra-op threads {E._default_threads()}.\n"
    )
    print(
        "| backend | name | cos to torch mean / min | top-10 overlap (queries / corpus) "
        "| 1-query p50 / p95 ms | batch-64 sent/s | new process → first vector s |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, r in rows.items():
        print(
            f"| {label} | `{r['name']}` | {r['cos_mean']:.4f} / {r['cos_min']:.4f} | "
            f"{r['q_top10']:.3f} / {r['c_top10']:.3f} | {r['p50']:.2f} / {r['p95']:.2f} | "
            f"{r['thr']:.0f} | {r['cold']:.1f}{'' if r['imports_torch'] else ' (no torch import)'} |"
        )
    print(
        "\nint8 runs one text per onnxruntime call: dynamic quantisation derives activation scales "
        "from the whole batch, so batching would make a text's vector depend on its batch-mates."
    )
    if cold:
        print(
            f"\nFirst start (empty cache): ONNX fp32 export + fusion + check {cold['fp32']:.1f} s; "
            f"int8 quantisation on top {cold['int8']:.1f} s. Later starts reuse the cached files."
        )
    choice, why = choose_default(rows)
    print(f"\nDefault: `{choice}` — {why}.")


if __name__ == "__main__":
    main()
