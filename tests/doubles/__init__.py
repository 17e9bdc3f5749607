"""This project's own test doubles and loggers, for its tests and benchmarks (not installed).

- :mod:`~tests.doubles.mlflow_server`: a real ``mlflow server`` process, and the pytest
  plugin that starts one per session;
- :mod:`~tests.doubles.mlflow_runs`: logs a dataframe or CSV as an MLflow run;
- :mod:`~tests.doubles.wandb_server`: a local server speaking the W&B GraphQL API to the
  real ``wandb`` client (no W&B server can run here);
- :mod:`~tests.doubles.wandb_offline_runs`: the real W&B SDK logs runs offline;
- :mod:`~tests.doubles.tiny_trainers`: a tiny GPT-2 trained by the real Hugging Face and
  Lightning trainers (needs torch).

Found from the checkout's root: pytest puts it on the path, and a benchmark script puts it
there itself. What a user needs in their own tests ships in :mod:`tracker_plugin.testing`.
"""
