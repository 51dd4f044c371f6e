"""The table of :mod:`mutate` (``tools/mutate.py``): which modules are mutated, which fast tests
cover each, which of them need servers, which functions run at import, and the allow-list of
equivalent mutants (``tools/mutation-equivalents.toml``).

A private module of the tool: ``tools/mutate.py`` runs as a script, so ``tools/`` is first on
``sys.path`` and this file is imported as ``_mutation_modules``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "tools" / "mutation-equivalents.toml"

#: module → the fast test files that cover it (the most specific first: ``-x`` stops at the first
#: failure, so a killed mutant usually costs one file).
MODULES: dict[str, list[str]] = {
    "prism_memory/ranking.py": [
        "tests/unit/test_ranking.py",
        "tests/unit/test_fusion_edges.py",
        "tests/unit/test_fusion_arithmetic.py",
        "tests/unit/test_memory_store.py",
    ],
    "prism_memory/stores/rules.py": [
        "tests/unit/test_inherited_tombstones.py",
        "tests/unit/test_memory_store.py",
        "tests/unit/test_travelling_scopes.py",
    ],
    "prism_memory/working.py": [
        "tests/unit/test_working_schema.py",
        "tests/unit/test_working_via_facade.py",
        "tests/unit/test_memory_store.py",
        "tests/unit/test_context_provider.py",
    ],
    "prism_memory/limits.py": [
        "tests/unit/test_limits.py",
        "tests/unit/test_limits_documented.py",
        "tests/unit/test_memory_store.py",
        "tests/unit/test_context_provider.py",
        "tests/unit/test_embedding.py",
    ],
    "prism_memory/context.py": [
        "tests/unit/test_context_provider.py",
        "tests/unit/test_context_edges.py",
    ],
    "prism_memory/redaction.py": [
        "tests/unit/test_redaction.py",
        "tests/unit/test_memory_store.py",
        "tests/unit/test_context_provider.py",
    ],
    "prism_memory/embedding.py": [
        "tests/unit/test_embedding.py",
        "tests/unit/test_hash_embedder_reference.py",
        "tests/unit/test_embedder_protocol.py",
        "tests/unit/test_memory_store.py",
    ],
    "prism_memory/lexical.py": [
        "tests/unit/test_lexical.py",
        "tests/unit/test_bm25_reference.py",
        "tests/unit/test_fusion.py",
        "tests/unit/test_fusion_arithmetic.py",
    ],
    "prism_memory/_cursor.py": [
        "tests/unit/test_cursor.py",
    ],
    "prism_memory/rag/_fusion.py": [
        "tests/unit/test_rag_fusion.py",
    ],
    "prism_memory/entries.py": [
        "tests/unit/test_entries.py",
    ],
    "prism_memory/invariants.py": [
        "tests/unit/test_invariants.py",
    ],
    "prism_memory/importing/_entry.py": [
        "tests/unit/test_import_entry.py",
    ],
    "prism_memory/_validation.py": [
        "tests/unit/test_model_checks.py",
    ],
    "prism_memory/_inputs.py": [
        "tests/unit/test_model_inputs.py",
        "tests/unit/test_model_checks.py",
    ],
    "prism_memory/_results.py": [
        "tests/unit/test_model_results.py",
        "tests/unit/test_entry_fields.py",
    ],
    "prism_memory/rag_types.py": [
        "tests/unit/test_rag_types.py",
        "tests/unit/test_rag_chunking.py",
    ],
    "prism_memory/rag/chunking.py": [
        "tests/unit/test_rag_chunking.py",
        "tests/unit/test_rag_chunking_bounds.py",
    ],
    "prism_memory/stores/_records.py": [
        "tests/unit/test_store_checks.py",
        "tests/unit/test_store_records.py",
    ],
    "prism_memory/indexing/policy.py": [
        "tests/unit/test_indexing_policy.py",
    ],
    "prism_memory/indexing/threads.py": [
        "tests/unit/test_indexing_threads.py",
    ],
    "prism_memory/postgres/_errors.py": [
        "tests/unit/test_db_errors.py",
    ],
    "prism_memory/stores/_governance.py": [
        "tests/unit/test_store_governance.py",
    ],
    # ---- modules whose tests need servers: PostgreSQL, PgBouncer, a streaming replica (started
    # once per session by :func:`servers`, shared by every forked run)
    "prism_memory/_memory/observed.py": [
        "tests/telemetry/test_observed_calls.py",
        "tests/telemetry/test_capture_switch.py",
        "tests/telemetry/test_traces_metrics.py",
    ],
    "prism_memory/_telemetry.py": [
        "tests/telemetry/test_telemetry_state.py",
        "tests/telemetry/test_telemetry_shim.py",
        "tests/telemetry/test_observed_calls.py",
        "tests/telemetry/test_capture_switch.py",
        "tests/telemetry/test_traces_metrics.py",
        "tests/telemetry/test_canary.py",
    ],
    "prism_memory/postgres/statements/_base.py": [
        "tests/unit/test_statement_base.py",
        "tests/unit/test_entry_fields.py",
        "tests/unit/test_tenant_routing.py",
        "tests/postgres/test_write_path.py",
        "tests/postgres/test_read_path.py",
        "tests/postgres/test_generations.py",
    ],
    "prism_memory/integrations/mcp/_identity.py": [
        "tests/mcp/test_mcp_identity_config.py",
        "tests/mcp/test_mcp_identity.py",
        "tests/mcp/test_mcp_http_edges.py",
        "tests/mcp/test_mcp_transports.py::test_http_refuses_a_request_without_a_valid_token",
        "tests/mcp/test_mcp_isolation.py::test_two_tokens_on_one_http_server_share_nothing",
    ],
    "prism_memory/integrations/mcp/_http.py": [
        "tests/mcp/test_mcp_identity.py",
        "tests/mcp/test_mcp_http_edges.py",
        "tests/mcp/test_mcp_transports.py::test_http_refuses_a_request_without_a_valid_token",
        "tests/mcp/test_mcp_isolation.py::test_two_tokens_on_one_http_server_share_nothing",
    ],
    "prism_memory/integrations/mcp/_server.py": [
        "tests/mcp/test_mcp_server_surface.py",
        "tests/mcp/test_mcp_identity.py",
        "tests/mcp/test_mcp_http_edges.py",
        "tests/mcp/test_mcp_transports.py::test_http_client_calls_every_tool",
        "tests/mcp/test_mcp_isolation.py::test_two_tokens_on_one_http_server_share_nothing",
    ],
    "prism_memory/integrations/mcp/_models.py": [
        "tests/mcp/test_mcp_server_surface.py",
        "tests/mcp/test_mcp_transports.py::test_http_client_calls_every_tool",
    ],
    "prism_memory/postgres/_executor.py": [
        "tests/unit/test_executor_helpers.py",
        "tests/postgres/test_executor_units.py",
        "tests/unit/test_replica_readiness.py",
        "tests/postgres/test_read_retry.py",
        "tests/topology/test_host_engine_reads.py",
        "tests/topology/test_pooler_session_state.py",
        "tests/topology/test_replica_routing.py",
        "tests/topology/test_replica.py",
        "tests/postgres/test_server_terminated.py",
        "tests/postgres/test_write_faults.py",
        # not tests/topology/test_replica_faults.py: it stops and freezes the standby, which only
        # a pair it started itself allows (the session's shared pair cannot be stopped)
    ],
    "prism_memory/postgres/_engine.py": [
        "tests/unit/test_engine_config.py",
        "tests/postgres/test_engine_codec.py",
        "tests/postgres/test_kept_connections.py",
        "tests/topology/test_pooler_session_state.py",
        "tests/topology/test_pooler.py",
        "tests/postgres/test_server_terminated.py",
        "tests/postgres/test_store.py",
        "tests/topology/test_replica.py",
    ],
}

SERVED = ("tests/postgres/", "tests/topology/", "tests/mcp/", "tests/telemetry/")
"""Test paths that need the servers :func:`mutate.servers` starts."""


IMPORT_TIME: dict[str, set[str]] = {
    "prism_memory/_memory/observed.py": {"public_call"},
    "prism_memory/_telemetry.py": {"traced"},
}
"""Functions that run at import -- decorator factories applied to the package's own classes and
functions -- per module: swapping their code afterwards would change nothing already decorated, so
a change inside them (their inner functions included) is run from the file instead."""


def load_equivalents() -> dict[str, str]:
    """The allow-list: mutant key → why that mutant cannot change behaviour."""
    if not EQUIVALENTS.exists():
        return {}
    entries = tomllib.loads(EQUIVALENTS.read_text()).get("equivalent", [])
    listed: dict[str, str] = {}
    for entry in entries:
        reason = str(entry.get("reason", "")).strip()
        if not reason:
            raise SystemExit(f"{EQUIVALENTS.name}: {entry.get('mutant')!r} has no reason")
        listed[str(entry["mutant"])] = reason
    return listed
