"""ikp_cute.pipelines.names: the stems pipeline names are made of (pure Python)."""

from __future__ import annotations

import pytest

from ikp_cute.pipelines.names import assigned_variable, maker_stem, participant_stem, short_name


@pytest.mark.parametrize(
    ("line", "variable"),
    [
        ("        pipeline_k = pipeline_custom.PipelineTmaAsync.create(", "pipeline_k"),
        ("    self.ab_pipeline = make(", "ab_pipeline"),
        ("    ring: PipelineAsync = X.create(", "ring"),
        ("    return pipeline_cls.create(", None),
        ("    if a == b:", None),
    ],
)
def test_assigned_variable(line, variable):
    assert assigned_variable(line) == variable


@pytest.mark.parametrize(("variable", "name"), [("pipeline_k", "k"), ("ab_pipeline", "ab"), ("ring", "ring"),
                                                ("pipeline_", "pipeline_"), ("sched_pipe", "sched")])
def test_short_name(variable, name):
    assert short_name(variable) == name


@pytest.mark.parametrize(
    ("targets", "name"),
    [
        (["load_q_producer", "load_q_consumer"], "load_q"),
        (["q_prod", "q_cons"], "q"),
        (["mma_s0_producer", "mma_s0_consumer"], "mma_s0"),
        (["producer_kv", "consumer_kv"], "kv"),
        (["acc_pipeline_producer", "acc_pipeline_consumer"], "acc"),
        (["prod", "cons"], None),  # no stem: never a name made of a role word
        (["producer", "consumer"], None),
        (["a", "b"], None),
    ],
)
def test_participant_stem(targets, name):
    assert participant_stem(targets) == name


@pytest.mark.parametrize(
    ("function", "name"),
    [
        ("make_and_init_load_q_pipeline", "load_q"),
        ("make_ab_pipeline", "ab"),
        ("create_kv_pipe", "kv"),
        ("_make_epi_store_pipeline", "epi_store"),
        ("make_pipeline", None),
    ],
)
def test_maker_stem(function, name):
    assert maker_stem(function) == name
