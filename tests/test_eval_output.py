"""Where `python -m gspo_agents.eval` writes its report: never over another model's report."""

from pathlib import Path

from omegaconf import OmegaConf

from gspo_agents.eval import eval_output_path


def cfg(tmp_path: Path, **eval_cfg):
    base = {"model_path": None, "run_dir": None, "split": "test", "out": None}
    return OmegaConf.create(
        {
            "eval": base | eval_cfg,
            "env": {"name": "arithmetic"},
            "trainer": {"run_dir": str(tmp_path / "runs" / "arithmetic-gspo-seed0")},
        }
    )


def make_run(run_dir: Path) -> Path:
    weights = run_dir / "weights" / "step300"
    weights.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("{}\n")
    return weights


def test_a_run_dir_gets_its_report_beside_its_metrics(tmp_path):
    run = tmp_path / "r"
    weights = make_run(run)
    assert eval_output_path(cfg(tmp_path, run_dir=str(run)), str(weights)) == run / "eval-test.json"


def test_one_of_a_runs_weights_is_named_by_its_step(tmp_path):
    run = tmp_path / "r"
    weights = make_run(run)
    got = eval_output_path(cfg(tmp_path, model_path=str(weights)), str(weights))
    assert got == run / "eval-test-step300.json"


def test_another_model_never_lands_in_the_default_run_dir(tmp_path):
    # a cold-start model evaluated with the default config used to overwrite the default run's
    # eval-test.json (the trained model's report)
    model = tmp_path / "sft" / "aa342c10"
    model.mkdir(parents=True)
    c = cfg(tmp_path, model_path=str(model))
    got = eval_output_path(c, str(model))
    assert got == tmp_path / "runs" / "eval" / "arithmetic-test-aa342c10.json"
    assert Path(c.trainer.run_dir) not in got.parents


def test_an_explicit_out_wins(tmp_path):
    c = cfg(tmp_path, out=str(tmp_path / "x.json"), run_dir=str(tmp_path / "r"))
    assert eval_output_path(c, "whatever") == tmp_path / "x.json"
