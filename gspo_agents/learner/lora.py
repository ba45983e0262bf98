"""LoRA adapters (PEFT) on the learner's model: wrap, merge, and write the adapter.

With `model.lora.rank > 0` the learner trains low-rank adapters on the named linear layers and
keeps the base frozen (PEFT `get_peft_model`): the optimizer holds only the adapters, so Adam's
state and the gradients shrink to the adapters' size. The frozen base doubles as the KL
reference: the reference's log-probs are the same module run with the adapters disabled
(`reference_mode`), never a second copy of the weights.

What leaves the learner:
- `merged_tensors`: the full model with every adapter folded in, W + (alpha / r) B A, under the
  base model's own parameter names: an ordinary HF checkpoint any engine loads;
- `adapter_tensors` + `write_adapter`: the adapter alone in PEFT's format
  (adapter_config.json + adapter_model.safetensors), for an engine that applies adapters itself
  (SGLang `--enable-lora`, `/load_lora_adapter`) and for export.

Both work on a gathered full state dict (checkpoint.export_hf gathers it under FSDP2), so they
are pure functions of tensors and names. Not here: sharding (parallel.py), checkpoints
(checkpoint.py keeps only the trainable tensors of a LoRA model).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from gspo_agents.models import LoraConfig, ModelConfigError

PEFT_PREFIX = "base_model.model."  # PeftModel -> LoraModel -> the HF model
ADAPTER_NAME = "default"
ADAPTER_DIR = "adapter"  # beside an exported HF directory's weights: the adapter alone


class LoraSetupError(ModelConfigError):
    """The LoRA config cannot be applied to this model (the message names the fix)."""


def is_lora(model: nn.Module) -> bool:
    return hasattr(model, "peft_config")


def apply_lora(model: nn.Module, cfg: LoraConfig) -> nn.Module:
    """`model` wrapped by PEFT with fresh adapters (B = 0: the wrapped model computes exactly
    what `model` does); the base's parameters are frozen."""
    try:
        import peft
    except ImportError as exc:
        raise LoraSetupError(
            "model.lora.rank > 0 needs the peft package: pip install 'gspo-agents[lora]' "
            "(or pip install peft)"
        ) from exc
    missing = [t for t in cfg.target_modules if t not in linear_module_names(model)]
    if missing:
        raise LoraSetupError(
            f"model.lora.target_modules: {missing} name no linear layer of "
            f"{type(model).__name__}; its linear layers are {sorted(linear_module_names(model))}"
        )
    peft_cfg = peft.LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,  # type: ignore[arg-type]  # PEFT annotates int; alpha / r is all it uses
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return peft.get_peft_model(model, peft_cfg)


def linear_module_names(model: nn.Module) -> set[str]:
    """The last path component of every nn.Linear in `model` (what target_modules match)."""
    return {
        name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)
    }


def base_model(model: nn.Module) -> nn.Module:
    """The HF model inside a PEFT wrapper (the model itself otherwise)."""
    return model.get_base_model() if is_lora(model) else model


@contextlib.contextmanager
def reference_mode(model: nn.Module) -> Iterator[None]:
    """The frozen base's forward: adapters off inside (a no-op for a model without them)."""
    if not is_lora(model):
        yield
        return
    with model.disable_adapter():
        yield


def scaling(model: nn.Module) -> float:
    cfg = model.peft_config[ADAPTER_NAME]
    return float(cfg.lora_alpha) / float(cfg.r)


def merged_tensors(state: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """A PEFT model's full state dict -> the base model's, with W + scale * B @ A folded in.

    Names: `base_model.model.X.base_layer.weight` -> `X.weight`; adapters are dropped after
    merging; everything else loses the PEFT prefix. Computed in fp32."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if ".lora_" in name:
            continue
        plain = name.removeprefix(PEFT_PREFIX)
        if ".base_layer." not in plain:
            out[plain] = t
            continue
        module = name.rsplit(".base_layer.", 1)[0]
        plain = plain.replace(".base_layer.", ".")
        a = state.get(f"{module}.lora_A.{ADAPTER_NAME}.weight")
        if a is None or not plain.endswith(".weight"):
            out[plain] = t
            continue
        b = state[f"{module}.lora_B.{ADAPTER_NAME}.weight"]
        delta = (b.float() @ a.float()) * scale
        out[plain] = (t.float() + delta).to(t.dtype)
    return out


def adapter_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapters of a PEFT model's state dict under PEFT's saved names (no adapter name:
    `...q_proj.lora_A.weight`), as `save_pretrained` writes them."""
    tag = f".{ADAPTER_NAME}."
    return {
        name.replace(tag, "."): t.detach().contiguous()
        for name, t in state.items()
        if ".lora_A." in name or ".lora_B." in name
    }


def write_adapter(
    out_dir: Path, model: nn.Module, tensors: dict[str, torch.Tensor], base_dir: str
) -> None:
    """PEFT's adapter format: adapter_config.json (base_model_name_or_path = `base_dir`) and
    adapter_model.safetensors; loadable with `PeftModel.from_pretrained(base, out_dir)`."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = model.peft_config[ADAPTER_NAME]
    cfg.base_model_name_or_path = str(base_dir)
    cfg.save_pretrained(str(out_dir))
    save_file(tensors, str(out_dir / "adapter_model.safetensors"), metadata={"format": "pt"})


def adapter_rank(adapter_dir: str | Path) -> tuple[int, list[str]]:
    """The rank and target modules an adapter directory declares (adapter_config.json)."""
    config = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    targets = config.get("target_modules") or []
    return int(config["r"]), sorted(targets) if isinstance(targets, list) else [targets]
