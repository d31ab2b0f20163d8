"""The GPU check behind scripts/device_check.sh (issues 38, 45 and 52): its plan and slack rule
(plan.py), the steps (check.py), the programs they run (preflight.py, nccl_check.py,
ddp_rank.py, tasks.py, static_run.py) and the report (report.py). docs/speed.md says how to run
it."""
