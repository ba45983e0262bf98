"""`python -m gspo_agents.export RUN_DIR [--step N] [--merge-lora] [--push-to-hub REPO] [--out DIR]`

The final step of a run: its exported weights (`RUN_DIR/weights/stepN`, the latest unless
`--step`) as a self-contained Hugging Face directory with the tokenizer and a generated model
card (README.md: base model, env, algorithm, steps trained, the final metrics of
`metrics.jsonl`, the whole training config), optionally pushed to the Hub.

- A full fine-tuning run exports the full model: `AutoModelForCausalLM.from_pretrained(OUT)`.
- A LoRA run (`model.lora.rank > 0`) exports the adapter alone in PEFT's format by default
  (adapter_config.json naming the local base model, adapter_model.safetensors);
  `AutoModelForCausalLM.from_pretrained(OUT)` loads base + adapter where peft is installed and
  the base directory exists. `--merge-lora` exports the merged full model instead.
- `--push-to-hub REPO` uploads OUT to the Hub repo REPO (created if missing, private unless
  `--public`). Without a token (HF_TOKEN or `hf auth login`) it is refused before anything is
  written; without network it fails in one line, leaving the complete export in OUT.

Not here: training, evaluation (`python -m gspo_agents.eval`), converting formats. The run dir
is only read.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json")
ADAPTER_DIR = "adapter"  # learner/lora.py: the adapter beside a LoRA run's merged weights
CARD_METRICS = (
    "reward_mean",
    "loss",
    "clip_frac_tokens",
    "approx_kl",
    "kl_ref",
    "entropy",
    "grad_norm",
    "num_trajectories",
)


class ExportError(ValueError):
    """A run dir, step or option that cannot be exported; the message names the fix."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m gspo_agents.export",
        description="Export a run's weights as a Hugging Face directory with a model card.",
    )
    p.add_argument("run_dir", help="a training run's directory (trainer.run_dir)")
    p.add_argument("--step", type=int, default=None, help="weights of step N (default: latest)")
    p.add_argument(
        "--merge-lora",
        action="store_true",
        help="LoRA runs: the merged full model, not the adapter",
    )
    p.add_argument("--out", default=None, help="output directory (default: RUN_DIR/export-stepN)")
    p.add_argument("--push-to-hub", metavar="REPO", default=None, help="upload to this Hub repo")
    p.add_argument("--public", action="store_true", help="with --push-to-hub: a public repo")
    return p.parse_args(argv)


def weights_dir(run_dir: Path, step: int | None) -> Path:
    """RUN_DIR/weights/stepN (the latest without `step`), or an ExportError naming what exists."""
    if not run_dir.is_dir():
        raise ExportError(f"{run_dir} is not a directory: pass a training run's trainer.run_dir")
    found = sorted(
        (p for p in (run_dir / "weights").glob("step*") if p.name[4:].isdigit()),
        key=lambda p: int(p.name[4:]),
    )
    if not found:
        raise ExportError(
            f"{run_dir} has no exported weights (weights/stepN): train first, e.g. "
            f"`python -m gspo_agents.train trainer.run_dir={run_dir}`"
        )
    if step is None:
        return found[-1]
    chosen = run_dir / "weights" / f"step{step}"
    if chosen not in found:
        have = ", ".join(p.name for p in found)
        raise ExportError(
            f"--step {step}: {run_dir}/weights has no step{step} (a run keeps only its latest "
            f"weights; it has {have}); drop --step or pass one of those"
        )
    return chosen


def export(
    run_dir: Path, step: int | None = None, merge_lora: bool = False, out: Path | None = None
) -> Path:
    """Write the export directory (atomically: `<out>.tmp`, then renamed); returns it."""
    src = weights_dir(run_dir, step)
    step_n = int(src.name[4:])
    adapter = src / ADAPTER_DIR
    lora = (adapter / "adapter_config.json").is_file()
    if merge_lora and not lora:
        raise ExportError(
            f"--merge-lora: {run_dir} was trained without LoRA (model.lora.rank=0), so its "
            "weights are the full model already; drop --merge-lora"
        )
    out = out or run_dir / f"export-step{step_n}{'-merged' if merge_lora else ''}"
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    as_adapter = lora and not merge_lora
    for f in src.iterdir():  # tokenizer, generation config (and the model's config and weights)
        if not f.is_file():
            continue
        model_file = f.name == "config.json" or f.name.endswith(WEIGHT_SUFFIXES)
        if not (as_adapter and model_file):
            shutil.copy2(f, tmp / f.name)
    if as_adapter:
        for f in adapter.iterdir():
            shutil.copy2(f, tmp / f.name)
    base = base_of_adapter(tmp) if as_adapter else None
    card = model_card(run_dir, step_n, read_config(run_dir), read_metrics(run_dir), base)
    (tmp / "README.md").write_text(card)
    if out.exists():
        shutil.rmtree(out)
    tmp.replace(out)
    return out


def base_of_adapter(adapter_dir: Path) -> str:
    return json.loads((adapter_dir / "adapter_config.json").read_text())["base_model_name_or_path"]


def read_config(run_dir: Path) -> dict[str, Any]:
    import yaml

    path = run_dir / "config.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else {}


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def model_card(
    run_dir: Path,
    step: int,
    config: dict[str, Any],
    rows: list[dict[str, Any]],
    adapter_base: str | None = None,
) -> str:
    """README.md: what was trained, on what, how far, with what result, and how to load it.
    `adapter_base`: the base model directory of an adapter export (None: a full model)."""
    import yaml

    adapter = adapter_base is not None
    get = _getter(config)
    lora_rank = get("model.lora.rank") or 0
    kind = f"LoRA adapter (rank {lora_rank})" if adapter else "model"
    if lora_rank and not adapter:
        kind = f"model (LoRA rank {lora_rank}, merged)"
    lines = [
        "---",
        f"library_name: {'peft' if adapter else 'transformers'}",
        "tags: [gspo, gspo-agents, reinforcement-learning]",
        "---",
        "",
        f"# {run_dir.name}: a {kind} trained with GSPO",
        "",
        f"Trained with gspo-agents ({get('algorithm.name')}) on the "
        f"environment `{get('env.name')}` for {step} steps of {get('trainer.tasks_per_step')} "
        f"tasks x {get('rollout.num_samples_per_task')} samples, lr {get('trainer.lr')}, "
        f"starting from model `{get('model.name')}`"
        + (f" (`{get('model.path')}`)" if get("model.path") else "")
        + ".",
        "",
    ]
    if adapter:
        lines += [
            f"The adapter applies to the base model at `{adapter_base}` (the run's start model, "
            "after "
            "its cold start); that directory must exist where the adapter is loaded, or "
            "export with `--merge-lora` for a self-contained model.",
            "",
        ]
    lines += _metrics_section(rows, step)
    lines += [
        "## Load",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'model = AutoModelForCausalLM.from_pretrained("DIR")'
        + ("  # base + adapter (needs peft)" if adapter else ""),
        'tokenizer = AutoTokenizer.from_pretrained("DIR")',
        "```",
        "",
        "## Training config",
        "",
        "```yaml",
        yaml.safe_dump(config, sort_keys=False).rstrip() if config else "# (no config.yaml)",
        "```",
        "",
    ]
    return "\n".join(lines)


def _metrics_section(rows: list[dict[str, Any]], step: int) -> list[str]:
    if not rows:
        return ["No metrics.jsonl in the run directory.", ""]
    last = next((r for r in reversed(rows) if r.get("step") == step), rows[-1])
    out = [f"## Final metrics (step {last.get('step')})", "", "| metric | value |", "|---|---:|"]
    out += [f"| {k} | {_fmt(last[k])} |" for k in CARD_METRICS if k in last]
    rewards = [r["reward_mean"] for r in rows if isinstance(r.get("reward_mean"), int | float)]
    if len(rewards) >= 2:
        tenth = max(1, len(rewards) // 10)
        first, final = rewards[:tenth], rewards[-tenth:]
        out += [
            "",
            f"Mean reward over the first {tenth} step(s): {sum(first) / len(first):.3f}; over "
            f"the last {tenth}: {sum(final) / len(final):.3f} ({len(rewards)} steps logged).",
        ]
    return [*out, ""]


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _getter(config: dict[str, Any]):
    def get(key: str) -> Any:
        node: Any = config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    return get


# --------------------------------------------------------------------------------------------
# the Hub
# --------------------------------------------------------------------------------------------
def hub_token() -> str:
    """HF_TOKEN or the stored login's token; refuses (before anything is written) without one."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise ExportError(
            "--push-to-hub needs a Hugging Face token: set HF_TOKEN=hf_... or run "
            "`hf auth login` (or drop --push-to-hub and upload the directory later)"
        )
    return token


def push(out: Path, repo: str, token: str | None, private: bool = True) -> str:
    """Upload `out` to the Hub repo `repo`; one-line errors for no network or a bad token."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(token=token)
    try:
        api.create_repo(repo, private=private, exist_ok=True)
        api.upload_folder(folder_path=str(out), repo_id=repo, commit_message="gspo-agents export")
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", None)
        why = "the token was rejected" if status in (401, 403) else f"the Hub answered {status}"
        raise ExportError(
            f"could not push to {repo}: {why} ({str(exc).splitlines()[0][:200]}); the export "
            f"is complete in {out}: fix the token or repo and upload it with "
            f"`hf upload {repo} {out}`"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - the HTTP client's transport errors vary by version
        if not _is_network_error(exc):
            raise
        raise ExportError(
            f"could not reach the Hugging Face Hub to push to {repo} ({type(exc).__name__}: "
            f"{str(exc)[:200]}); the export is complete in {out}: upload it later with "
            f"`hf upload {repo} {out}`"
        ) from exc
    return f"https://huggingface.co/{repo}"


def _is_network_error(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    network = {"ConnectionError", "TransportError", "NetworkError", "TimeoutException", "OSError"}
    return bool(names & network)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        token = hub_token() if args.push_to_hub else None
        out = export(
            Path(args.run_dir), args.step, args.merge_lora, Path(args.out) if args.out else None
        )
        print(f"exported {out}", file=sys.stderr)
        if args.push_to_hub:
            url = push(out, args.push_to_hub, token, private=not args.public)
            print(f"pushed to {url}", file=sys.stderr)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
