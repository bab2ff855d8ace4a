"""The embedder: shape, normalisation, determinism, meaning, ONNX == torch, offline loading,
the ONNX cache (built once, reused, safe under concurrent starts) and the singleton.

No database: these tests only need the shipped model files. The ONNX export is built once
per run into a temporary folder by two processes racing for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from memoryhub import embeddings as E

ROOT = Path(__file__).resolve().parent.parent
MODULE_FILE = ROOT / "memoryhub" / "embeddings.py"

SENTENCES = [
    "The meeting with Alice moved to Thursday at 3pm.",
    "The Wi-Fi password for the guest network is written on the fridge.",
    "I am allergic to penicillin.",
    "The production database is backed up every night at 2am UTC.",
    "Favourite coffee order: oat flat white, no sugar.",
    "Use the staging cluster for load tests, never production.",
    "The rental contract requires three months notice before moving out.",
    "Our flight to Lisbon leaves at 7:40 from terminal 2.",
    "The rate limiter allows 100 requests per minute per token.",
    "Dr. Patel's clinic is closed on Wednesdays.",
    "The spare house key is with the neighbours at number 12.",
    "Invoices must be paid within thirty days of receipt.",
    "Die Besprechung wurde auf Donnerstag verschoben.",
    "会议改到星期四下午三点。",
    "emoji test 🚀🔥 and accents: café, naïve, façade",
    "",
    "ok",
    "a",
    "   spaces   around   ",
    "SHOUTING IN CAPITALS ABOUT THE DEPLOY",
    "x" * 3000,
    " ".join(["The quarterly report covers revenue, churn, hiring and the product roadmap."] * 40),
    "def embed(self, texts): return [self.model(t) for t in texts]",
    "https://example.com/path?query=1&other=two#fragment",
]

NETWORK_GUARD = r"""
import json, os, socket, sys
attempts = []
_orig_connect, _orig_connect_ex, _orig_gai = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
def _record(address):
    attempts.append(repr(address))
def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _record(address)
        raise OSError(101, "network is unreachable (test guard)")
    return _orig_connect(self, address)
def connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _record(address)
        return 101
    return _orig_connect_ex(self, address)
def getaddrinfo(host, *a, **k):
    _record(("dns", host))
    raise socket.gaierror(-2, "name resolution blocked (test guard)")
socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
"""


def _offline_probe_env(**extra: str) -> dict[str, str]:
    """Environment that would reach the Hub if anything tried: offline flags unset, endpoint and
    proxies pointing at a closed port, no Django settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "DJANGO_SETTINGS_MODULE"}
        and not k.startswith("MEMORYHUB_")
    }
    env.update(
        HF_ENDPOINT="http://127.0.0.1:9",
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


def _run_python(code: str, env: dict[str, str], timeout: float = 600) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- fixtures

RACE_CODE = (
    NETWORK_GUARD
    + r"""
import io, logging
log = io.StringIO()
logging.basicConfig(level=logging.INFO, stream=log)
sys.path.insert(0, os.environ["PYTHONPATH"])
import importlib.util
spec = importlib.util.spec_from_file_location("memoryhub.embeddings", os.environ["EMBED_MODULE_FILE"])
E = importlib.util.module_from_spec(spec); sys.modules["memoryhub.embeddings"] = E; spec.loader.exec_module(E)
path = E.prepare_onnx_model("fp32", sys.argv[1] if len(sys.argv) > 1 else os.environ["CACHE"])
print(json.dumps({"path": str(path), "exported": "prepared fp32" in log.getvalue(),
                  "attempts": attempts, "offline": os.environ.get("HF_HUB_OFFLINE")}))
"""
)


@pytest.fixture(scope="module")
def race(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two processes start at once on an empty cache, both without offline flags and with
    the network blocked: they must produce one export, once."""
    cache = tmp_path_factory.mktemp("embed-cache")
    env = _offline_probe_env(CACHE=str(cache), EMBED_MODULE_FILE=str(MODULE_FILE))
    procs = [_run_python(RACE_CODE, env) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-4000:]
        results.append(_last_json(out))
    return {"cache": cache, "results": results}


@pytest.fixture(scope="module")
def cache_dir(race: dict) -> Path:
    return race["cache"]


@pytest.fixture(scope="module")
def onnx_embedder(cache_dir: Path) -> E.MiniLMOnnxEmbedder:
    return E.MiniLMOnnxEmbedder(cache_dir)


@pytest.fixture(scope="module")
def int8_embedder(cache_dir: Path) -> E.MiniLMOnnxInt8Embedder:
    return E.MiniLMOnnxInt8Embedder(cache_dir)


@pytest.fixture(scope="module")
def torch_embedder() -> E.MiniLMTorchEmbedder:
    return E.MiniLMTorchEmbedder()


@pytest.fixture(params=["torch", "onnx", "int8"])
def any_embedder(request: pytest.FixtureRequest) -> E.Embedder:
    return request.getfixturevalue(
        {"torch": "torch_embedder", "onnx": "onnx_embedder", "int8": "int8_embedder"}[request.param]
    )


@contextlib.contextmanager
def embedder_setting(value: str):
    """Point MEMORYHUB_EMBEDDER at ``value`` whether or not Django settings are configured."""
    from django.conf import settings

    old_env = os.environ.get("MEMORYHUB_EMBEDDER")
    os.environ["MEMORYHUB_EMBEDDER"] = value
    ctx: contextlib.AbstractContextManager = contextlib.nullcontext()
    if settings.configured:
        from django.test import override_settings

        ctx = override_settings(MEMORYHUB_EMBEDDER=value)
    try:
        with ctx:
            E.reset_embedder()
            yield
    finally:
        E.reset_embedder()
        if old_env is None:
            os.environ.pop("MEMORYHUB_EMBEDDER", None)
        else:
            os.environ["MEMORYHUB_EMBEDDER"] = old_env


def cos(a, b) -> float:
    return float(np.dot(np.asarray(a), np.asarray(b)))


# ---------------------------------------------------------------- the interface


def test_dimensions_and_protocol(any_embedder: E.Embedder) -> None:
    assert isinstance(any_embedder, E.Embedder)
    assert any_embedder.dimensions == 384 == E.DIMENSIONS
    vecs = any_embedder.embed(["hello world", "second text"])
    assert len(vecs) == 2
    assert all(len(v) == 384 for v in vecs)
    assert all(isinstance(x, float) for x in vecs[0])
    assert any_embedder.name.startswith("all-MiniLM-L6-v2")


def test_vectors_are_l2_normalised(any_embedder: E.Embedder) -> None:
    vecs = np.asarray(any_embedder.embed(SENTENCES))
    assert vecs.shape == (len(SENTENCES), 384)
    assert np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_empty_batch_and_bad_input(any_embedder: E.Embedder) -> None:
    assert any_embedder.embed([]) == []
    assert any_embedder.embed(()) == []
    with pytest.raises(TypeError):
        any_embedder.embed("a single string is not a batch")
    with pytest.raises(TypeError):
        any_embedder.embed(["ok", 3])  # type: ignore[list-item]


def test_embed_query_is_embed_of_one(any_embedder: E.Embedder) -> None:
    text = "when does the flight to Lisbon leave"
    q = any_embedder.embed_query(text)
    assert len(q) == 384
    assert cos(q, any_embedder.embed([text])[0]) > 0.99999


def test_deterministic_and_independent_of_batch(any_embedder: E.Embedder) -> None:
    first = np.asarray(any_embedder.embed(SENTENCES))
    second = np.asarray(any_embedder.embed(SENTENCES))
    np.testing.assert_allclose(first, second, atol=1e-6)
    # Alone (no padding) vs in a mixed-length batch (padded), and in another order.
    for i in (0, 2, 16):
        alone = any_embedder.embed([SENTENCES[i]])[0]
        assert cos(alone, first[i]) > 0.9999
    reordered = np.asarray(any_embedder.embed(SENTENCES[::-1]))[::-1]
    np.testing.assert_allclose(reordered, first, atol=1e-4)


def test_similar_sentences_are_closer_than_unrelated(any_embedder: E.Embedder) -> None:
    pairs = [
        ("The cat sat on the mat.", "A kitten was sitting on the rug.", "Quarterly revenue grew by five percent."),
        ("How do I reset my password?", "I forgot my login password.", "The weather in Lisbon is sunny today."),
        (
            "The server crashed during the deploy.",
            "Production went down while we were releasing.",
            "My grandmother bakes excellent apple pie.",
        ),
    ]
    for anchor, close, far in pairs:
        a, c, f = any_embedder.embed([anchor, close, far])
        assert cos(a, c) > cos(a, f) + 0.2, (anchor, cos(a, c), cos(a, f))


def test_query_finds_the_right_memory(any_embedder: E.Embedder) -> None:
    corpus = any_embedder.embed(SENTENCES)
    for query, expected in [
        ("what is the wifi password", 1),
        ("which antibiotics can't I take", 2),
        ("when are the database backups", 3),
        ("who has a copy of my house key", 10),
    ]:
        q = any_embedder.embed_query(query)
        best = int(np.argmax(np.asarray(corpus) @ np.asarray(q)))
        assert best == expected, (query, SENTENCES[best])


# ---------------------------------------------------------------- ONNX agrees with torch


def test_default_is_onnx_fp32() -> None:
    assert E._import_class(E.DEFAULT_EMBEDDER) is E.default_embedder is E.MiniLMOnnxEmbedder


def test_default_onnx_agrees_with_torch(onnx_embedder, torch_embedder) -> None:
    assert isinstance(onnx_embedder, E.default_embedder)
    ref = np.asarray(torch_embedder.embed(SENTENCES))
    got = np.asarray(onnx_embedder.embed(SENTENCES))
    per_sentence = (ref * got).sum(axis=1)
    assert per_sentence.min() >= 0.99, dict(zip(SENTENCES, per_sentence.round(5), strict=True))
    # In practice fp32 ONNX reproduces the reference exactly.
    assert per_sentence.min() >= 0.9999
    assert onnx_embedder.name == torch_embedder.name


def test_int8_agrees_closely_with_torch(int8_embedder, torch_embedder) -> None:
    ref = np.asarray(torch_embedder.embed(SENTENCES))
    got = np.asarray(int8_embedder.embed(SENTENCES))
    per_sentence = (ref * got).sum(axis=1)
    assert per_sentence.mean() >= 0.99
    assert per_sentence.min() >= 0.97
    # A different vector space: it must not share a name with the exact backends.
    assert int8_embedder.name != torch_embedder.name


def test_embedding_from_many_threads(onnx_embedder) -> None:
    expected = np.asarray(onnx_embedder.embed(SENTENCES[:8]))
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                results.append(np.asarray(onnx_embedder.embed(SENTENCES[:8])))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 12
    for r in results:
        np.testing.assert_allclose(r, expected, atol=1e-5)


# ---------------------------------------------------------------- offline


def test_module_sets_offline_environment() -> None:
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["TRANSFORMERS_OFFLINE"] == "1"


def test_export_race_is_offline_and_exports_once(race: dict) -> None:
    results = race["results"]
    paths = {r["path"] for r in results}
    assert len(paths) == 1
    path = Path(paths.pop())
    assert path.is_file() and path.stat().st_size > 10_000_000
    assert [r["exported"] for r in results].count(True) == 1, results
    for r in results:
        assert r["attempts"] == [], r["attempts"]
        assert r["offline"] == "1"
    leftovers = [p.name for p in path.parent.iterdir() if ".tmp" in p.name]
    assert leftovers == []


LOAD_CODE = (
    NETWORK_GUARD
    + r"""
import importlib.util
spec = importlib.util.spec_from_file_location("memoryhub.embeddings", os.environ["EMBED_MODULE_FILE"])
E = importlib.util.module_from_spec(spec); sys.modules["memoryhub.embeddings"] = E; spec.loader.exec_module(E)
offline = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
torch_vec = E.MiniLMTorchEmbedder().embed(["offline please"])[0]
emb = E.get_embedder()                     # default class, data dir from the environment
vec = emb.embed_query("offline please")
import django.conf
print(json.dumps({
    "attempts": attempts, "offline": offline, "cls": type(emb).__name__, "dims": len(vec),
    "cos": sum(a * b for a, b in zip(vec, torch_vec)),
    "django_configured": django.conf.settings.configured,
    "same": E.get_embedder() is emb,
}))
"""
)


def test_loading_does_not_touch_the_network_and_needs_no_django(cache_dir: Path) -> None:
    env = _offline_probe_env(EMBED_MODULE_FILE=str(MODULE_FILE), MEMORYHUB_DATA_DIR=str(cache_dir))
    proc = _run_python(LOAD_CODE, env)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]
    r = _last_json(out)
    assert r["attempts"] == []
    assert r["offline"] == ["1", "1"]
    assert r["cls"] == "MiniLMOnnxEmbedder"
    assert r["dims"] == 384
    assert r["cos"] > 0.9999
    assert r["django_configured"] is False
    assert r["same"] is True
    # It used the prepared cache rather than exporting into a new one.
    assert sorted(p.name for p in (cache_dir / "models").iterdir()) == [E.MODEL_NAME]


# ---------------------------------------------------------------- the cache


def test_second_prepare_reuses_the_export(cache_dir: Path) -> None:
    first = E.prepare_onnx_model("fp32", cache_dir)
    before = first.stat().st_mtime_ns, first.stat().st_ino
    again = E.prepare_onnx_model("fp32", cache_dir)
    via_api = E.prepare_embedder(cache_dir, embedder="memoryhub.embeddings.MiniLMOnnxEmbedder")
    assert again == first and via_api == [first]
    assert (first.stat().st_mtime_ns, first.stat().st_ino) == before


def test_int8_prepare_reuses_the_export(cache_dir: Path, int8_embedder) -> None:
    path = int8_embedder.model_path
    before = path.stat().st_mtime_ns
    fp32_before = (path.parent / "model.onnx").stat().st_mtime_ns
    assert E.prepare_embedder(cache_dir, embedder=E.MiniLMOnnxInt8Embedder) == [path]
    assert path.stat().st_mtime_ns == before
    assert (path.parent / "model.onnx").stat().st_mtime_ns == fp32_before
    info = json.loads((path.parent / "info.json").read_text())
    assert info["model"] == E.MODEL_NAME and info["weights_sha256"]


def test_cache_is_keyed_by_weights_and_onnxruntime(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    here = E.onnx_cache_dir(cache_dir)
    assert here.parent == cache_dir / "models" / E.MODEL_NAME
    weights_key = E._weights_hash(E.model_dir())[:16]
    assert here.name.startswith(weights_key) and onnxruntime.__version__ in here.name
    monkeypatch.setattr(onnxruntime, "__version__", "0.0.0-other")
    other = E.onnx_cache_dir(cache_dir)
    assert other != here and "0.0.0-other" in other.name


def test_prepare_for_torch_backend_is_a_no_op(tmp_path: Path) -> None:
    assert E.prepare_embedder(tmp_path, embedder=E.MiniLMTorchEmbedder) == []
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the singleton


class _CountingEmbedder:
    instances = 0
    name = "counting"
    dimensions = 384

    def __init__(self) -> None:
        type(self).instances += 1

    def embed(self, texts):
        return [[1.0] + [0.0] * 383 for _ in texts]

    def embed_query(self, text):
        return self.embed([text])[0]


def test_get_embedder_is_a_thread_safe_singleton_chosen_by_setting() -> None:
    _CountingEmbedder.instances = 0
    with embedder_setting(f"{__name__}._CountingEmbedder"):
        got: list[object] = []
        barrier = threading.Barrier(8)

        def grab() -> None:
            barrier.wait()
            got.append(E.get_embedder())

        threads = [threading.Thread(target=grab) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 8 and all(g is got[0] for g in got)
        assert isinstance(got[0], _CountingEmbedder)
        assert _CountingEmbedder.instances == 1
        E.reset_embedder()
        assert E.get_embedder() is not got[0]
        assert _CountingEmbedder.instances == 2


def test_bad_setting_fails_clearly() -> None:
    with embedder_setting("memoryhub.embeddings.NoSuchEmbedder"), pytest.raises(ImportError):
        E.get_embedder()


def test_a_web_worker_embeds_on_its_share_of_the_cores(monkeypatch) -> None:
    """One thread per core the worker may use (MEMORYHUB_CORES_PER_PROCESS, set by
    mcpapi.serving), all of them up to 4 otherwise; MEMORYHUB_EMBEDDER_THREADS wins."""
    monkeypatch.setattr(E.os, "sched_getaffinity", lambda pid: set(range(8)))
    for name in ("MEMORYHUB_EMBEDDER_THREADS", "MEMORYHUB_CORES_PER_PROCESS"):
        monkeypatch.delenv(name, raising=False)
    assert E._default_threads() == 4
    monkeypatch.setenv("MEMORYHUB_CORES_PER_PROCESS", "1")
    assert E._default_threads() == 1
    monkeypatch.setenv("MEMORYHUB_CORES_PER_PROCESS", "3")
    assert E._default_threads() == 3
    monkeypatch.setenv("MEMORYHUB_CORES_PER_PROCESS", "16")
    assert E._default_threads() == 4
    monkeypatch.setattr(E.os, "sched_getaffinity", lambda pid: {0, 1})
    assert E._default_threads() == 2
    monkeypatch.setenv("MEMORYHUB_EMBEDDER_THREADS", "3")
    assert E._default_threads() == 3
    # A value that is no whole number from 1 is ignored: the embedder still starts.
    monkeypatch.setattr(E.os, "sched_getaffinity", lambda pid: set(range(8)))
    for bad in ("2.5", "auto", "0", "-1"):
        monkeypatch.setenv("MEMORYHUB_EMBEDDER_THREADS", bad)
        monkeypatch.setenv("MEMORYHUB_CORES_PER_PROCESS", bad)
        assert E._default_threads() == 4, bad
