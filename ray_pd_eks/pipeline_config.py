"""The promotion pipeline's settings: where it runs, what it builds, and the environments it
deploys to, read from the ``pipeline`` and ``environments`` context keys.

Both live in ``cdk.json``'s ``context`` beside every other setting (``pipeline.example.json``
shows the shape). That file, committed, is the one place: the pipeline's own synth step and its
self-mutation run ``cdk synth`` on the repository, so a value given only with ``-c`` on a laptop
would be lost at the next self-mutation. ``-c`` still works (a JSON string per key) for trying
a configuration with ``cdk synth``.

No ``pipeline`` key means no pipeline: ``app.py`` synthesizes the plain Stage, exactly as
without this module. ``-c pipeline=`` (empty) or ``null`` switches a configured pipeline off for
one command, e.g. to deploy a sandbox from a checkout whose ``cdk.json`` declares the pipeline.

Validation mirrors :mod:`ray_pd_eks.config`: every problem is collected, one line each, naming
the environment (or ``pipeline``) and the key, and raised together as a
:class:`PipelineConfigError`, a :class:`~ray_pd_eks.config.ConfigError`, so ``app.py`` reports
it like any other configuration error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ray_pd_eks.config import AppConfig, ConfigError

PIPELINE_KEY = "pipeline"
ENVIRONMENTS_KEY = "environments"

PIPELINE_KEYS = frozenset(
    {"account", "region", "connectionArn", "repository", "branch", "selfMutation"}
)
ENVIRONMENT_KEYS = frozenset({"name", "account", "region", "production", "approval", "overrides"})
# Overrides may not move an environment: its account and region are its own keys.
_NOT_OVERRIDABLE = frozenset({"account", "region"})
DEFAULT_BRANCH = "main"

_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
# A Stage construct id and a part of every stack name: letters, digits and '-'.
_ENV_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,31}$")
# Names that mean production (prod, production, prod-eu, ...): such an environment is always a
# production one, whatever the data says.
_PRODUCTION = re.compile(r"^prod(uction)?(-.*)?$", re.IGNORECASE)
_CONNECTION_ARN = re.compile(
    r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):[a-z0-9-]+:\d{12}:"
    r"connection/[0-9a-f-]{36}$"
)
_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_BRANCH = re.compile(r"^(?!/)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]+(?<![/.])$")
# config.py's suffix tells the user to use -c; inside an environment the fix is its overrides.
_CONTEXT_HINT = re.compile(
    r" \(fix it with `\S+ settings --set \S+=\.\.\.`, or -c \S+=\.\.\. for one command\)$"
)


class PipelineConfigError(ConfigError):
    """The pipeline or an environment is declared wrongly; one line per problem."""


@dataclass(frozen=True)
class DeploymentEnvironment:
    """One stage of the pipeline: the Stage deployed with ``config`` after an optional approval.

    ``config`` is the app's configuration with this environment's ``overrides`` applied and its
    ``account``/``region`` set, validated as a whole. ``production``: a production name,
    ``"production": true``, or the account of another production environment (production is
    an account, not a name: a stage named ``canary`` in the production account deploys with
    the same rights); the pipeline stack then always adds the permission-broadening check and
    the manual approval, in code (``approval`` cannot turn them off).
    """

    name: str
    account: str
    region: str
    approval: bool
    config: AppConfig
    overrides: Mapping[str, Any] = field(default_factory=dict)
    production: bool = False


@dataclass(frozen=True)
class PipelineConfig:
    """The pipeline's own placement and source, and the environments in promotion order."""

    account: str
    region: str
    connection_arn: str
    repository: str
    branch: str
    environments: tuple[DeploymentEnvironment, ...]
    # Whether a push updates the pipeline itself before its stages run (CDK Pipelines'
    # self-mutation). Off whenever a production environment exists: the gate in front of
    # production is then the pipeline an administrator deployed, not one the change rewrote.
    self_mutation: bool = True

    @property
    def production_accounts(self) -> frozenset[str]:
        """The accounts that hold a production environment."""
        return frozenset(e.account for e in self.environments if e.production)

    @property
    def cross_account(self) -> bool:
        """True when some environment is in another account than the pipeline: its artifacts
        must then be encrypted with a KMS key that the other accounts are allowed to use."""
        return any(e.account != self.account for e in self.environments)


def is_production_name(name: str) -> bool:
    """Whether ``name`` reads as production (``prod``, ``production``, ``prod-eu``, ...)."""
    return bool(_PRODUCTION.match(name))


def _json(value: Any, where: str, problems: list[str]) -> Any:
    """``-c key=...`` gives strings; cdk.json gives JSON. Accept both."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text in ("", "null"):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        problems.append(f"{where}: not valid JSON ({err.msg} at character {err.pos})")
        return None


def _problem(where: str, key: str, value: Any, why: str) -> str:
    return f"{where}: '{key}' = {json.dumps(value)}: {why}"


def _unknown_keys(where: str, obj: Mapping[str, Any], allowed: frozenset[str]) -> list[str]:
    known = ", ".join(sorted(allowed))
    return [
        _problem(where, key, obj[key], f"unknown key; the keys are {known}")
        for key in obj
        if key not in allowed
    ]


def _account_region(where: str, obj: Mapping[str, Any]) -> list[str]:
    out = []
    account, region = obj.get("account"), obj.get("region")
    if not isinstance(account, str) or not _ACCOUNT.match(account):
        why = "required: the 12-digit AWS account id, as a string"
        out.append(_problem(where, "account", account, why))
    if not isinstance(region, str) or not _REGION.match(region):
        out.append(_problem(where, "region", region, "required: an AWS region such as us-west-2"))
    return out


def _parse_pipeline(raw: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The pipeline's own keys as PipelineConfig's string fields (``selfMutation`` is checked
    here and decided with the environments, see :func:`_self_mutation`)."""
    where = PIPELINE_KEY
    problems = _unknown_keys(where, raw, PIPELINE_KEYS) + _account_region(where, raw)
    arn = raw.get("connectionArn")
    if not isinstance(arn, str) or not _CONNECTION_ARN.match(arn):
        why = (
            "required: the ARN of an AWS CodeConnections connection, "
            "arn:aws:codeconnections:<region>:<account>:connection/<id>"
        )
        problems.append(_problem(where, "connectionArn", arn, why))
    repository = raw.get("repository")
    if not isinstance(repository, str) or not _REPOSITORY.match(repository):
        why = "required: the repository as owner/name, e.g. my-org/ray-pd-eks"
        problems.append(_problem(where, "repository", repository, why))
    branch = raw.get("branch", DEFAULT_BRANCH)
    if not isinstance(branch, str) or not _BRANCH.match(branch):
        why = f"must be a git branch name (default {DEFAULT_BRANCH})"
        problems.append(_problem(where, "branch", branch, why))
    self_mutation = raw.get("selfMutation")
    if self_mutation is not None and not isinstance(self_mutation, bool):
        problems.append(_problem(where, "selfMutation", self_mutation, "must be true or false"))
    values = {
        "account": str(raw.get("account")),
        "region": str(raw.get("region")),
        "connection_arn": str(arn),
        "repository": str(repository),
        "branch": str(branch),
    }
    return values, problems


def _override_problems(where: str, err: ConfigError) -> list[str]:
    """Re-word AppConfig's lines (``context key 'k' = v: why (fix it with ...)``) so they
    point at this environment's overrides."""
    lines = []
    for line in str(err).splitlines():
        line = _CONTEXT_HINT.sub("", line)
        line = line.replace("context key '", "overrides.'", 1)
        lines.append(f"{where}: {line}")
    return lines


def _parse_environment(
    index: int, raw: Any, base: AppConfig
) -> tuple[DeploymentEnvironment | None, list[str]]:
    if not isinstance(raw, Mapping):
        where = f"environments[{index}]"
        return None, [f"{where}: must be an object with name, account, region, overrides"]
    name = raw.get("name")
    where = f"environment '{name}'" if isinstance(name, str) and name else f"environments[{index}]"
    problems = _unknown_keys(where, raw, ENVIRONMENT_KEYS) + _account_region(where, raw)
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        why = "required: a letter, then letters, digits or '-', at most 32 characters"
        problems.append(_problem(where, "name", name, why))
        name = str(name)
    named_production = is_production_name(name)
    production = raw.get("production", named_production)
    if not isinstance(production, bool):
        problems.append(_problem(where, "production", production, "must be true or false"))
        production = True
    elif named_production and not production:
        why = (
            "the name marks a production environment, which is always one: the approval "
            "before it is fixed in code (stacks/pipeline_stack.py); remove the key"
        )
        problems.append(_problem(where, "production", production, why))
    approval = raw.get("approval", production)
    if not isinstance(approval, bool):
        problems.append(_problem(where, "approval", approval, "must be true or false"))
    elif production and not approval:
        why = (
            "a production environment is always approved by a person before it deploys "
            "(fixed in stacks/pipeline_stack.py, so a change to cdk.json cannot remove the "
            "gate); remove the key"
        )
        problems.append(_problem(where, "approval", approval, why))
    overrides = raw.get("overrides", {})
    if not isinstance(overrides, Mapping):
        why = "must be an object of settings (context keys of cdk.json)"
        problems.append(_problem(where, "overrides", overrides, why))
        overrides = {}
    settings = AppConfig.context_keys()
    for key in overrides:
        if key in _NOT_OVERRIDABLE:
            why = f"set the environment's own '{key}' instead"
            problems.append(_problem(where, f"overrides.{key}", overrides[key], why))
        elif key not in settings:
            # AppConfig ignores reserved and CDK keys; inside overrides they would do nothing.
            why = "not a setting of this app (see cdk.json's context for the keys)"
            problems.append(_problem(where, f"overrides.{key}", overrides[key], why))
    if problems:
        return None, problems
    try:
        config = base.with_overrides(
            {**overrides, "account": raw["account"], "region": raw["region"]}
        )
    except ConfigError as err:
        return None, _override_problems(where, err)
    env = DeploymentEnvironment(
        name=name,
        account=raw["account"],
        region=raw["region"],
        approval=bool(approval),
        production=bool(production),
        config=config,
        overrides=dict(overrides),
    )
    return env, []


def _clashes(envs: list[DeploymentEnvironment]) -> list[str]:
    """Two environments in one account and region must not both own the same cluster name."""
    out = []
    seen: dict[tuple[str, str, str], str] = {}
    for env in envs:
        key = (env.account, env.region, env.config.cluster_name)
        if key in seen:
            why = (
                f"environment '{seen[key]}' already deploys this cluster name to "
                f"{env.account}/{env.region}; set overrides.clusterName"
            )
            problems = _problem(f"environment '{env.name}'", "clusterName", key[2], why)
            out.append(problems)
        else:
            seen[key] = env.name
    return out


def _gate_production_accounts(
    envs: list[DeploymentEnvironment], raw_envs: list[Any]
) -> tuple[list[DeploymentEnvironment], list[str]]:
    """Production is an account: every environment in the account of a production one is
    production too (its stage would deploy with the same deploy role into the same account).
    A ``production`` or ``approval`` of ``false`` given for such an environment is refused."""
    accounts = {e.account: e.name for e in envs if e.production}
    given = {
        raw.get("name"): raw for raw in raw_envs if isinstance(raw, Mapping) and raw.get("name")
    }
    out, problems = [], []
    for env in envs:
        owner = accounts.get(env.account)
        if env.production or owner is None:
            out.append(env)
            continue
        raw = given.get(env.name, {})
        for key in ("production", "approval"):
            if raw.get(key) is False:
                why = (
                    f"account {env.account} holds production environment '{owner}', so this "
                    "environment deploys into production with the same rights and is gated like "
                    "it (check and approval, fixed in stacks/pipeline_stack.py); remove the key "
                    "or move the environment to another account"
                )
                problems.append(_problem(f"environment '{env.name}'", key, False, why))
        out.append(replace(env, production=True, approval=True))
    return out, problems


def _self_mutation(
    raw: Mapping[str, Any], envs: list[DeploymentEnvironment]
) -> tuple[bool, list[str]]:
    """Self-mutation defaults to on without production and is refused with it."""
    production = [e.name for e in envs if e.production]
    value = raw.get("selfMutation")
    if not isinstance(value, bool):
        return not production, []
    if value and production:
        why = (
            f"production environment '{production[0]}' is deployed by this pipeline: a "
            "self-mutating pipeline rewrites its own gate from the change it is about to gate, "
            "so production pipelines never self-mutate (update one with `npx cdk deploy "
            "RayPdEksPipeline`, see docs/pipeline.md); remove the key"
        )
        return False, [_problem(PIPELINE_KEY, "selfMutation", value, why)]
    return value, []


def pipeline_from_context(context: Mapping[str, Any], base: AppConfig) -> PipelineConfig | None:
    """The pipeline declared in ``context``, or None when none is.

    ``base`` is the app's configuration from the same context; each environment starts from it.
    Raises :class:`PipelineConfigError` listing every problem.
    """
    problems: list[str] = []
    raw_pipeline = _json(context.get(PIPELINE_KEY), PIPELINE_KEY, problems)
    raw_envs = _json(context.get(ENVIRONMENTS_KEY), ENVIRONMENTS_KEY, problems)
    if problems:
        raise PipelineConfigError("\n".join(problems))
    if raw_pipeline is None:
        if raw_envs and PIPELINE_KEY not in context:
            raise PipelineConfigError(
                f"{ENVIRONMENTS_KEY}: declared without '{PIPELINE_KEY}'; add the pipeline "
                "object (see pipeline.example.json) or remove the environments"
            )
        return None
    if not isinstance(raw_pipeline, Mapping):
        raise PipelineConfigError(
            f"{PIPELINE_KEY}: must be an object with account, region, connectionArn, "
            "repository and branch (see pipeline.example.json)"
        )
    values, problems = _parse_pipeline(raw_pipeline)
    if not isinstance(raw_envs, list) or not raw_envs:
        problems.append(
            f"{ENVIRONMENTS_KEY}: must be a non-empty list of environments "
            "(name, account, region, optional approval and overrides), in promotion order"
        )
        raw_envs = []
    envs: list[DeploymentEnvironment] = []
    names: dict[str, int] = {}
    for index, raw in enumerate(raw_envs):
        env, env_problems = _parse_environment(index, raw, base)
        problems += env_problems
        name = raw.get("name") if isinstance(raw, Mapping) else None
        if isinstance(name, str):
            lowered = name.lower()
            if lowered in names:
                why = f"duplicate name: environments[{names[lowered]}] has it already"
                problems.append(_problem(f"environments[{index}]", "name", name, why))
            names.setdefault(lowered, index)
        if env is not None:
            envs.append(env)
    problems += _clashes(envs)
    envs, gated = _gate_production_accounts(envs, raw_envs)
    self_mutation, mutation_problems = _self_mutation(raw_pipeline, envs)
    problems += gated + mutation_problems
    if problems:
        raise PipelineConfigError("\n".join(problems))
    return PipelineConfig(environments=tuple(envs), self_mutation=self_mutation, **values)


__all__ = [
    "DeploymentEnvironment",
    "PipelineConfig",
    "PipelineConfigError",
    "is_production_name",
    "pipeline_from_context",
]
