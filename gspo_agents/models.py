"""Model checkpoints: build the tiny CPU models locally, resolve any HF directory, load them.

`resolve_model(cfg)` turns a `ModelConfig` into a local Hugging Face directory:
- `tiny` / `tiny-moe`: a small Qwen3 / Qwen3-MoE checkpoint with random weights and a byte-level
  BPE tokenizer trained here on a deterministic corpus this module generates (English, arithmetic
  with `\\boxed{}` answers, Python and C++). `tiny-agent`: the `tiny` architecture whose tokenizer
  also sees tool-calling text (tool preambles, schemas, calls), so tool prompts cost half the
  tokens. Nothing is downloaded. The result is cached under
  `cache_dir` by a content hash of the recipe and built atomically (temp dir, then rename), so
  concurrent builders never see a half-written checkpoint.
- `hf`: any existing HF directory given by `path`.

Whatever the source, weights and tokenizer are always read back through the ordinary
`from_pretrained` path (`load_model`, `load_tokenizer`), so the tiny models exercise the same code
as real ones. This module never contacts a model hub: loading uses `local_files_only=True`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import torch

ModelName = Literal["tiny", "tiny-agent", "tiny-moe", "hf"]
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Bump when the recipe changes in a way the hashed fields do not capture.
_RECIPE_VERSION = 1
_VOCAB_SIZE = 1536  # tokenizer training target; the model uses the trained size
_MAX_POSITIONS = 4096

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)

# Qwen3-style ChatML template. The assistant turn opens with "<|im_start|>assistant\n". With
# `tools=` it renders Qwen3's tool preamble (function schemas inside <tools></tools> in the system
# turn, calls as <tool_call>{json}</tool_call>); `tool` messages become <tool_response> blocks in
# one user turn, as Qwen3 renders them. Without tools and tool messages it renders exactly the
# plain ChatML of recipe version 1, so the models and runs of conversations without tools are
# unchanged.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": '
    '<function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'tool' %}"
    "{%- if loop.first or loop.previtem['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif not (tools and loop.first and message['role'] == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] if call.get('function') else call %}"
    "{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}{%- else %}"
    "{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


class ModelConfigError(ValueError):
    """A model config names something that does not exist or cannot be built."""


# every linear map of a Llama/Qwen decoder block (attention and MLP), as in the QLoRA recipe
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True, slots=True)
class LoraConfig:
    """Low-rank adapters (PEFT LoRA) on the named linear layers; rank 0: full fine-tuning."""

    rank: int = 0
    alpha: float = 16.0  # the update is scaled by alpha / rank
    target_modules: tuple[str, ...] = LORA_TARGETS  # module names (their last path component)
    dropout: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_modules", tuple(self.target_modules))
        if self.rank < 0:
            raise ModelConfigError(f"model.lora.rank must be >= 0 (0: off), got {self.rank}")
        if self.rank and not self.alpha > 0:
            raise ModelConfigError(f"model.lora.alpha must be > 0, got {self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise ModelConfigError(f"model.lora.dropout must be in [0, 1), got {self.dropout}")
        if self.rank and not self.target_modules:
            raise ModelConfigError(
                f"model.lora.target_modules is empty; name the linear layers to adapt, e.g. "
                f"[{','.join(LORA_TARGETS)}]"
            )

    @property
    def enabled(self) -> bool:
        return self.rank > 0


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: ModelName = "tiny"
    path: str | None = None  # required for name="hf": a local HF directory
    cache_dir: str = "~/.cache/gspo-agents/models"
    dtype: str = "float32"
    lora: LoraConfig = field(default_factory=LoraConfig)  # the learner's; the model dir ignores it

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):
            object.__setattr__(self, "lora", LoraConfig(**self.lora))
        if self.name not in get_args(ModelName):
            raise ModelConfigError(
                f"model.name={self.name!r} is not one of {list(get_args(ModelName))}; "
                "use name=hf with model.path=DIR for your own checkpoint"
            )
        if self.dtype not in _DTYPES:
            raise ModelConfigError(f"model.dtype={self.dtype!r} is not one of {list(_DTYPES)}")


# ---------------------------------------------------------------------------------------------
# Recipes of the tiny models (sized for a 2-core CPU: ~1-3M parameters).


def _dense_arch() -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": _VOCAB_SIZE,
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": _MAX_POSITIONS,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
    }


def _moe_arch() -> dict[str, Any]:
    # Same attention as the dense model; 8 experts, top-2, each expert half the dense MLP width,
    # so the active parameter count per token matches the dense model's MLP.
    arch = _dense_arch() | {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 192,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }
    del arch["head_dim"]  # Qwen3-MoE derives it from hidden_size / num_attention_heads
    return arch


def _recipe(name: str) -> dict[str, Any]:
    arch = _moe_arch() if name == "tiny-moe" else _dense_arch()
    recipe: dict[str, Any] = {
        "recipe_version": _RECIPE_VERSION,
        "arch": arch,
        "tokenizer": {"vocab_size": _VOCAB_SIZE, "special": list(SPECIAL_TOKENS), "digits": True},
        "chat_template": CHAT_TEMPLATE,
        "seed": 0,
    }
    if name == "tiny-agent":
        recipe["corpus"] = "agent"  # the tokenizer also sees tool-calling text
    return recipe


def _recipe_hash(recipe: dict[str, Any], corpus: str) -> str:
    h = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode())
    h.update(corpus.encode())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Deterministic tokenizer corpus.

_WORDS = (
    "the a an of to and in is it that for on with as was be by this are or from at which we "
    "you can not have has all one two three answer question problem solve number sum product "
    "difference result compute find value total each step first then finally so therefore "
    "program input output test case function return print read write line integer string list "
    "array loop while if else true false example code python c++ please think carefully "
    "time year people way day man woman child world life hand part place work week case point "
    "government company system group fact story house water money month night room mother "
    "area country state family student teacher book word business issue side kind head service "
    "friend father power hour game market school city idea problem body information reason "
    "small large little great good new old right left high long different important public "
    "make know take see come give look use tell ask seem feel try leave call keep begin show "
    "hear play run move live believe hold bring happen provide sit stand lose pay meet include "
    "continue set learn change lead understand watch follow stop create speak allow add spend "
    "grow open walk win offer remember love consider appear buy wait serve die send expect build "
    "stay fall cut reach kill remain suggest raise pass sell require report decide pull equal "
    "minus plus times divided remainder prime even odd square root fraction decimal percent "
    "triangle circle angle area perimeter volume probability expected variance matrix vector "
    "graph tree edge vertex path query maximum minimum modulo binary search sort greedy dynamic"
).split()
_PY_SNIPPETS = (
    "def solve():\n    n = int(input())\n    a = list(map(int, input().split()))\n    print(sum(a))\n",
    "import sys\n\ndef main() -> None:\n    data = sys.stdin.read().split()\n    for x in data:\n        print(x)\n",
    "for i in range(10):\n    if i % 2 == 0:\n        continue\n    total += i * i\nreturn total\n",
    "class Node:\n    def __init__(self, value):\n        self.value = value\n        self.next = None\n",
    "result = [x for x in items if x > 0]\nwhile left < right:\n    mid = (left + right) // 2\n",
)
_CPP_SNIPPETS = (
    "#include <bits/stdc++.h>\nusing namespace std;\n\nint main() {\n    int n;\n    cin >> n;\n",
    "    vector<long long> a(n);\n    for (int i = 0; i < n; ++i) cin >> a[i];\n    cout << a[0] << endl;\n",
    "    sort(a.begin(), a.end());\n    long long ans = 0;\n    for (auto x : a) ans += x;\n    return 0;\n}\n",
    "std::string s;\nstd::getline(std::cin, s);\nif (s.empty()) { return 1; }\n",
)


def _arithmetic_line(rng: random.Random) -> str:
    a, b = rng.randint(0, 999), rng.randint(0, 999)
    op = rng.choice("+-*")
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return rng.choice(
        (
            f"What is {a} {op} {b}? The answer is \\boxed{{{value}}}.",
            f"Compute {a} {op} {b}.\n{a} {op} {b} = {value}\n\\boxed{{{value}}}",
            f"Solve: {a} {op} {b} = {value}. Final answer: \\boxed{{{value}}}",
        )
    )


def build_corpus(num_lines: int = 3000, seed: int = 0) -> str:
    """The tokenizer's training text: deterministic for a given (num_lines, seed)."""
    rng = random.Random(seed)
    lines = []
    for i in range(num_lines):
        kind = i % 4
        if kind == 0:
            n = rng.randint(5, 14)
            lines.append(" ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + ".")
        elif kind == 1:
            lines.append(_arithmetic_line(rng))
        elif kind == 2:
            lines.append(rng.choice(_PY_SNIPPETS))
        else:
            lines.append(rng.choice(_CPP_SNIPPETS))
    return "\n".join(lines)


_AgentTool = tuple[str, str, dict[str, tuple[str, str]]]
_AGENT_TOOLS: tuple[
    _AgentTool, ...
] = (  # generic agent tools: (name, description, {argument: (type, description)})
    ("bash", "Run a shell command.", {"command": ("string", "the command.")}),
    ("python", "Run Python code.", {"code": ("string", "the code.")}),
    ("read_file", "Read a file.", {"path": ("string", "file path.")}),
    (
        "write_file",
        "Create or overwrite a file.",
        {"path": ("string", "file path."), "content": ("string", "the new text.")},
    ),
    (
        "str_replace",
        "Replace text that occurs exactly once in a file.",
        {
            "path": ("string", "file path."),
            "old": ("string", "exact text to replace."),
            "new": ("string", "replacement text."),
        },
    ),
    ("run_tests", "Run the tests.", {}),
    ("submit", "Submit the fix (ends the episode).", {}),
    (
        "search",
        "Search the web.",
        {
            "query": ("string", "what to look for."),
            "limit": ("integer", "at most this many results."),
        },
    ),
    (
        "calculator",
        "Evaluate an arithmetic expression.",
        {"expression": ("string", "the expression.")},
    ),
)


def build_agent_corpus(num_lines: int = 400, seed: int = 0) -> str:
    """Tool-calling text for the `tiny-agent` tokenizer: Qwen3-style tool preambles with
    OpenAI-format schemas, `<tool_call>` blocks and `<tool_response>` turns, rendered with
    CHAT_TEMPLATE. A BPE trained without it spends ~2x the tokens on every tool prompt."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    template = _compile_jinja_template(CHAT_TEMPLATE)
    rng = random.Random(seed)
    schemas = [_schema(*tool) for tool in _AGENT_TOOLS]
    lines = []
    for _ in range(num_lines):
        tools = rng.sample(schemas, rng.randint(1, len(schemas)))
        fn = rng.choice(tools)["function"]
        args = {k: rng.choice(_WORDS) + ".py" for k in fn["parameters"]["properties"]}
        call = f"<tool_call>\n{json.dumps({'name': fn['name'], 'arguments': args})}\n</tool_call>"
        messages = [
            {"role": "user", "content": " ".join(rng.choice(_WORDS) for _ in range(8))},
            {"role": "assistant", "content": call},
            {"role": "tool", "content": rng.choice(_PY_SNIPPETS)},
        ]
        lines.append(template.render(messages=messages, tools=tools, add_generation_prompt=True))
    return "\n".join(lines)


def _schema(name: str, description: str, args: dict[str, tuple[str, str]]) -> dict[str, Any]:
    properties = {k: {"type": t, "description": d} for k, (t, d) in args.items()}
    parameters = {"type": "object", "properties": properties, "required": list(args)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def _train_tokenizer(corpus: str, out_dir: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits split one by one (as Qwen does) so numbers tokenize uniformly for arithmetic.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus.splitlines(keepends=True), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
        model_max_length=_MAX_POSITIONS,
    )
    fast.save_pretrained(out_dir)


def _build_tiny(name: str, recipe: dict[str, Any], corpus: str, out_dir: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    _train_tokenizer(corpus, out_dir)
    tokenizer = load_tokenizer(str(out_dir))
    special = {
        "pad_token_id": tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        "bos_token_id": tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        "eos_token_id": tokenizer.convert_tokens_to_ids(IM_END),
    }
    arch = dict(recipe["arch"])
    # The exact trained vocabulary: no embedding rows the tokenizer can never produce or decode.
    arch["vocab_size"] = len(tokenizer)
    model_type = arch.pop("model_type")
    config = AutoConfig.for_model(model_type, **arch, **special)
    torch.manual_seed(recipe["seed"])
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        **special, do_sample=True, temperature=1.0, top_p=1.0, top_k=0
    )
    model.save_pretrained(out_dir)
    (out_dir / "gspo_recipe.json").write_text(json.dumps({"name": name, **recipe}, indent=2))


def _build_cached(name: str, cache_dir: Path) -> Path:
    recipe = _recipe(name)
    corpus = build_corpus()
    if recipe.get("corpus") == "agent":
        corpus += "\n" + build_agent_corpus()
    final = cache_dir / f"{name}-{_recipe_hash(recipe, corpus)}"
    if (final / "config.json").exists():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-build-", dir=cache_dir))
    try:
        _build_tiny(name, recipe, corpus, tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process finished the same build first; its result is identical.
            if not (final / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def resolve_model(cfg: ModelConfig) -> str:
    """A local HF directory for `cfg`, building (and caching) the tiny models on first use."""
    if cfg.name == "hf":
        if not cfg.path:
            raise ModelConfigError(
                "model.name=hf needs model.path=DIR (a local Hugging Face checkpoint directory)"
            )
        path = Path(cfg.path).expanduser()
        if (path / "config.json").is_file():
            return str(path.resolve())
        if _looks_like_model_id(cfg.path) and not path.exists():
            return _from_hf_cache(cfg.path)
        raise ModelConfigError(
            f"model.path={cfg.path!r} is not a Hugging Face checkpoint directory "
            "(no config.json there); pass a directory written by save_pretrained, or a model "
            "id (ORG/NAME) already in the local Hugging Face cache"
        )
    if cfg.path is not None:
        raise ModelConfigError(
            f"model.path is only used with model.name=hf (got name={cfg.name!r}, path={cfg.path!r})"
        )
    return str(_build_cached(cfg.name, Path(cfg.cache_dir).expanduser()))


def _looks_like_model_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~"))


def _from_hf_cache(model_id: str) -> str:
    """The snapshot directory of `model_id` in the local Hugging Face cache (HF_HOME /
    HF_HUB_CACHE honoured); never downloads."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.constants import HF_HUB_CACHE
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        path = Path(snapshot_download(model_id, local_files_only=True))
    except LocalEntryNotFoundError as exc:
        raise ModelConfigError(
            f"model.path={model_id!r}: no local copy of this model in the Hugging Face cache "
            f"({HF_HUB_CACHE}); this project never downloads during a run. Fetch it first "
            f"(`huggingface-cli download {model_id}`) or pass a local directory"
        ) from exc
    if not (path / "config.json").is_file():
        raise ModelConfigError(
            f"model.path={model_id!r}: the cached snapshot {path} has no config.json"
        )
    return str(path)


def torch_dtype(dtype: str) -> torch.dtype:
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ModelConfigError(f"dtype={dtype!r} is not one of {list(_DTYPES)}") from None


def load_tokenizer(path: str):
    """The tokenizer of an HF directory (never a hub id)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def load_model(path: str, dtype: str = "float32") -> torch.nn.Module:
    """The causal LM of an HF directory in eval mode (never a hub id)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch_dtype(dtype), local_files_only=True
    )
    return model.eval()


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def model_config_dict(cfg: ModelConfig) -> dict[str, Any]:
    return asdict(cfg)
