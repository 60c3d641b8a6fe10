#!/usr/bin/env bash
# Mutation testing of the code that decides: configuration validation, the readiness checks, the
# KV proof and handler, the capacity watch, the node-template tagger, the default security
# group's restriction, the control-plane waiter, the cluster's delete guard, the cross-stack
# deploy order, and the CLI's verdicts and drill. Not part of CI (the whole scope, 6,433
# mutants: 14-17 minutes on two quiet cores, 25 on a shared machine); run it before resolving
# work that touches those modules.
# docs/testing.md has the current score and which tests judge which module's mutants
# (tests/mutation_plugin.py); `mutmut browse` walks the survivors.
#
#   scripts/mutation.sh                 the whole scope below
#   scripts/mutation.sh 'GLOB' ...      only the mutants matching these mutmut names, e.g.
#                                       'assets.lambda.capacity.handler.x_judge__mutmut_*'
#   JOBS=1 scripts/mutation.sh          fewer parallel workers (default: 2)
#
# Afterwards: `.venv/bin/mutmut show NAME` prints a mutant's diff, `.venv/bin/mutmut browse`
# walks the survivors. Results are kept in ./mutants/ (git-ignored); delete it for a clean run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"

# mutmut names a mutant <module>.<function>__mutmut_<n>; methods are xǁClassǁmethod. The scope
# is the functions whose result is a decision (accept/reject, pending/terminal, OK/WARN/FAIL,
# the exit code); rendering and plumbing around them are left out.
SCOPE=(
  # configuration: the parsers and the validation rules of the core settings
  'ray_pd_eks.config.parsing.x__as_*'
  'ray_pd_eks.config.settings.xǁAppConfigǁfrom_context__*'
  'ray_pd_eks.config.settings.xǁAppConfigǁvalidate__*'
  'ray_pd_eks.config.rules_cluster.x_kubernetes__*'
  'ray_pd_eks.config.rules_cluster.x__name__*'
  'ray_pd_eks.config.rules_cluster.x_names__*'
  'ray_pd_eks.config.rules_nodes.x_gpu_nodes__*'
  'ray_pd_eks.config.rules_nodes.x_gpu_storage__*'
  'ray_pd_eks.config.rules_model.x_serving__*'
  'ray_pd_eks.config.rules_nodes.x_system_nodes__*'
  # configuration: the rule tables' rows (ranges, choices, forms: the capacity settings, the
  # WAF rate limit and the other plain settings) and how a row reads its setting
  'ray_pd_eks.config.problems.xǁBoundsǁ__call____*'
  'ray_pd_eks.config.problems.xǁOneOfǁ__call____*'
  'ray_pd_eks.config.problems.xǁFormǁ__call____*'
  'ray_pd_eks.config.problems.x_setting__*'
  'ray_pd_eks.config.problems.x_check__*'
  # configuration: the engine, model access and region (DLC registry) rules
  'ray_pd_eks.config.rules_model.x_engine__*'
  'ray_pd_eks.config.rules_model.x_model_revision__*'
  'ray_pd_eks.config.rules_model.x_model_access__*'
  'ray_pd_eks.config.rules_cluster.x_environment__*'
  # configuration: the endpoint's rules (exposure, authentication, the identity provider's
  # keys, endpointJwtAudienceFormat), the revision test they share, the fix every message names
  'ray_pd_eks.config.rules_endpoint.x_endpoint__*'
  'ray_pd_eks.config.rules_endpoint.x__set_ones__*'
  'ray_pd_eks.config.rules_model.x_is_hf_revision__*'
  'ray_pd_eks.config.problems.x_set_hint__*'
  'ray_pd_eks.config.problems.x_problem__*'
  # the VPC's subnet plan (the internal ALB's /27s after the control plane's /28s)
  'ray_pd_eks.vpc_layout.x_vpc_layout__*'
  # cross-stack references: which a change removes, and what the user must deploy first
  'ray_pd_eks.cross_stack.x__endpoint_probe__*'
  'ray_pd_eks.cross_stack.xǁReferenceǁ__post_init____*'
  'ray_pd_eks.cross_stack.xǁReferenceǁapplies__*'
  'ray_pd_eks.cross_stack.x_removed_references__*'
  'ray_pd_eks.cross_stack.x_ordered_deploy__*'
  # readiness: the pure evaluations of Kubernetes JSON
  'assets.lambda.readiness.checks.x_gpu_nodes__*'
  'assets.lambda.readiness.checks.x_rayservice_state__*'
  'assets.lambda.readiness.checks.x_pod_problems__*'
  'assets.lambda.readiness.placement.x_placement__*'
  'assets.lambda.readiness.placement.x__by_replicas__*'
  'assets.lambda.readiness.checks.x_pod_gpus__*'
  'assets.lambda.readiness.checks.x__is_pull_failure__*'
  'assets.lambda.readiness.checks.x_quantity__*'
  'assets.lambda.readiness.checks.x_parse_time__*'
  # readiness: which NIXL log files to read (rotated pieces, live actors, job age)
  'assets.lambda.readiness.nixl_logs.x_log_files_to_read__*'
  'assets.lambda.readiness.nixl_logs.x__job_number__*'
  'assets.lambda.readiness.nixl_logs.x_oldest_piece__*'
  # readiness: the handler's verdicts
  'assets.lambda.readiness.terminal.x_terminal_failure__*'
  'assets.lambda.readiness.terminal.x__object_warning_is_terminal__*'
  'assets.lambda.readiness.terminal.x__unschedulable_is_terminal__*'
  'assets.lambda.readiness.kv_probe.x__chat_completion__*'
  'assets.lambda.readiness.handler.x__give_up_after__*'
  # readiness: the NIXL evidence (tail, then the file's head up to a byte cap; what is unseen),
  # the Ray dashboard's head read and actor list, and the KV probe's provider metrics
  'assets.lambda.readiness.nixl_logs.x_read_nixl_backends__*'
  'assets.lambda.readiness.nixl_logs.x__evidence_complete__*'
  'assets.lambda.readiness.nixl_logs.x__with_evidence__*'
  'assets.lambda.readiness.nixl_logs.x__completes__*'
  'assets.lambda.readiness.handler.x_provider_metrics__*'
  'assets.lambda.readiness.handler.x_scheduled_probe__*'
  'assets.lambda.readiness.kube.x__read_some__*'
  'assets.lambda.readiness.ray_dashboard.xǁRayDashboardǁread_log_head__*'
  'assets.lambda.readiness.ray_dashboard.xǁRayDashboardǁalive_actor_pids__*'
  # readiness: the KV proof (probe answer, NIXL counters, transfer verdict, provider)
  'assets.lambda.readiness.kvproof.x_*'
  'assets.lambda.readiness.kvproof.xǁNixlCountersǁfrom_texts__*'
  # capacity watch
  'assets.lambda.capacity.handler.x_judge__*'
  'assets.lambda.capacity.handler.x_classify__*'
  'assets.lambda.capacity.handler.x_poll__*'
  'assets.lambda.capacity.handler.x_failed_launches__*'
  'assets.lambda.capacity.handler.x__give_up_after__*'
  'assets.lambda.capacity.handler.x_watch_cluster_stack__*'
  'assets.lambda.capacity.handler.x_is_complete__*'
  # Cluster Autoscaler node-template tags on the GPU group's ASG
  'assets.lambda.asg_tags.handler.x_read_tags__*'
  'assets.lambda.asg_tags.handler.x_auto_scaling_groups__*'
  'assets.lambda.asg_tags.handler.x__tag_specs__*'
  'assets.lambda.asg_tags.handler.x_apply__*'
  'assets.lambda.asg_tags.handler.x_on_event__*'
  # the default security group's restriction (Create revokes, Update never fails, Delete keeps)
  'assets.lambda.default_sg.handler.x_ingress_rule__*'
  'assets.lambda.default_sg.handler.x_egress_rule__*'
  'assets.lambda.default_sg.handler.x__revoke__*'
  'assets.lambda.default_sg.handler.x_restrict__*'
  'assets.lambda.default_sg.handler.x_on_event__*'
  # the control-plane waiter (ACTIVE at the version, pending, the Cluster stack failed, give up)
  'assets.lambda.cluster_active.handler.x_on_event__*'
  'assets.lambda.cluster_active.handler.x_is_complete__*'
  'assets.lambda.cluster_active.handler.x_give_up_after__*'
  'assets.lambda.cluster_active.handler.x_version_tuple__*'
  'assets.lambda.cluster_active.handler.x_look_at_cluster__*'
  'assets.lambda.cluster_active.handler.x_look_at_stack__*'
  # the Cluster stack's delete guard (guard only the cluster's delete; gone, moving, stuck,
  # the wait)
  'assets.lambda.nodegroups_gone.handler.x_on_event__*'
  'assets.lambda.nodegroups_gone.handler.x_is_complete__*'
  'assets.lambda.nodegroups_gone.handler.x_guards_this_delete__*'
  'assets.lambda.nodegroups_gone.handler.x_look__*'
  'assets.lambda.nodegroups_gone.handler.x_describe__*'
  'assets.lambda.nodegroups_gone.handler.x_decide__*'
  # the rollback test every handler's stack_rolling_back is (the layer's pd_lambda)
  'assets.lambda.layer.python.pd_lambda.rollback.x_stack_rolling_back__*'
  'assets.lambda.layer.python.pd_lambda.rollback.x_stack_status__*'
  # the Cluster stack's reading both GPU-stack waiters share (the layer's pd_lambda)
  'assets.lambda.layer.python.pd_lambda.cluster_stack.*'
  # CLI verdicts
  'ray_pd_eks.cli.status.xǁSnapshotǁverdict__*'
  'ray_pd_eks.cli.status.xǁSnapshotǁ_waiting_for__*'
  'ray_pd_eks.cli.status.x_warmup_pod_state__*'
  'ray_pd_eks.cli.status.x__container_failure__*'
  'ray_pd_eks.cli.status.x_spare_nodes__*'
  'ray_pd_eks.cli.preflight.capacity.xǁCapacityChecksǁquota__*'
  'ray_pd_eks.cli.preflight.account.xǁAccountChecksǁbootstrap__*'
  'ray_pd_eks.cli.drill.x_drill_rules__*'
  'ray_pd_eks.cli.drill.x_kill_job__*'
  'ray_pd_eks.cli.drill.x_replacement__*'
  'ray_pd_eks.cli.drill.x_engine_pods__*'
  'ray_pd_eks.cli.drill.x_drill_verdict__*'
  'ray_pd_eks.cli.drill.x_run__*'
  'ray_pd_eks.cli.drill.x_last_warning__*'
  # coldstart: which timestamp starts and ends each measured step, and the model beside it
  'ray_pd_eks.cli.coldstart.x_go_duration_seconds__*'
  'ray_pd_eks.cli.coldstart.x_instance_id__*'
  'ray_pd_eks.cli.coldstart.x__started__*'
  'ray_pd_eks.cli.coldstart.x__on_node__*'
  'ray_pd_eks.cli.coldstart.x_joined_step__*'
  'ray_pd_eks.cli.coldstart.x_image_step__*'
  'ray_pd_eks.cli.coldstart.x_weights_step__*'
  'ray_pd_eks.cli.coldstart.x_worker_step__*'
  'ray_pd_eks.cli.coldstart.x_pulled_figure__*'
  'ray_pd_eks.cli.coldstart.x_launch_times__*'
  'ray_pd_eks.cli.coldstart.x_scale_out_of__*'
  'ray_pd_eks.cli.coldstart.x_serve_lines__*'
  'ray_pd_eks.cli.coldstart.x_engine_times__*'
  'ray_pd_eks.cli.coldstart.x_running_at__*'
  'ray_pd_eks.cli.coldstart.x_serve_steps__*'
  'ray_pd_eks.cli.coldstart.x_read_serve__*'
  'ray_pd_eks.timeline.x_scale_out_model__*'
)
if [ "$#" -gt 0 ]; then SCOPE=("$@"); fi

# One temporary directory per mutant's pytest session, removed at the end (tests/mutation_plugin.py).
MUTMUT_BASETEMP=$(mktemp -d "${TMPDIR:-/tmp}/mutmut-basetemp.XXXXXX")
export MUTMUT_BASETEMP
trap 'rm -rf "$MUTMUT_BASETEMP"' EXIT

start=$(date +%s)
# mutmut's progress line redraws itself; keep the log readable.
.venv/bin/mutmut run --max-children "${JOBS:-2}" "${SCOPE[@]}" 2>&1 | tr '\r' '\n' | grep -v '^\s*$' \
  | grep -v -E '^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]' || true
echo "run took $(( $(date +%s) - start )) s"

# The score over the scope: killed (or timed out) / every mutant that ran.
.venv/bin/mutmut results --all true 2>/dev/null | .venv/bin/python -c '
import fnmatch, sys
from collections import Counter
scope = sys.argv[1:]
rows = [line.strip().rsplit(": ", 1) for line in sys.stdin if ": " in line]
rows = [(n, s) for n, s in rows if any(fnmatch.fnmatch(n, p) for p in scope)]
counts = Counter(s for _, s in rows)
ran = sum(v for k, v in counts.items() if k in ("killed", "survived", "timeout", "suspicious"))
killed = counts["killed"] + counts["timeout"]
print("mutants:", dict(sorted(counts.items())))
if ran:
    print(f"score: {killed}/{ran} killed = {100 * killed / ran:.1f} %")
survivors = sorted(n for n, s in rows if s == "survived")
print(f"{len(survivors)} survivors" + ("; `.venv/bin/mutmut show NAME` for each:" if survivors else ""))
for name in survivors:
    print("  " + name)
' "${SCOPE[@]}"
