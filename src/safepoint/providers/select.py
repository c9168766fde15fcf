"""The model behind a run, rebuilt the same way on every resume: a scenario's scripted model, or an
OpenAI-compatible server (its base URL and model are kept in the run's header; the API key never is)."""

from __future__ import annotations

import json
from typing import Any

from safepoint.errors import ConfigError
from safepoint.providers.base import Provider
from safepoint.providers.scripted import ScriptedProvider
from safepoint.records import RunInfo
from safepoint.standins.scenario import Scenario, parse_scenario


def openai_config(model: str, base_url: str | None, api_key_env: str | None) -> dict[str, Any]:
    return {"kind": "openai", "model": model, "base_url": base_url, "api_key_env": api_key_env}


def scenario_of(info: RunInfo) -> Scenario | None:
    if info.scenario is None:
        return None
    return parse_scenario(json.dumps(info.scenario).encode(), f"scenario of run {info.run_id}")


def provider_for(info: RunInfo, *, model: str | None = None) -> tuple[Provider, str]:
    """The run's provider and its system prompt. ``model`` overrides the recorded one (a deliberate switch)."""
    if info.provider is not None and info.provider.get("kind") == "openai":
        import os

        from safepoint.providers.openai_compat import OpenAIProvider

        env = info.provider.get("api_key_env")
        key = os.environ.get(str(env)) if env else None
        base_url = info.provider.get("base_url")
        provider = OpenAIProvider(
            model or str(info.provider["model"]),
            base_url=str(base_url) if base_url else None,
            api_key=key,
            api_key_env=str(env) if env else None,
        )
        return provider, str(info.provider.get("system") or "")
    script = scenario_of(info)
    if script is None:
        raise ConfigError(
            f"run {info.run_id!r} was started by your own loop (no scenario, no model server); resume it from there"
        )
    scripted = ScriptedProvider(script)
    if model is not None:
        scripted.model = model
    return scripted, script.system
