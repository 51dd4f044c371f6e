"""Which store roles each conformance check exercises, so an adapter that leaves a role out
(:data:`~prism_memory.stores.base.VECTOR_STORE_ROLES`: no share grants, say) runs the checks of the
roles it keeps.

A leaf of ``prism_memory.testing``: the runner (``_conformance``) imports it, and it imports no
check module. Every check exercises the core roles (:data:`CORE_ROLES`: a memory writes entries
and indexes them); :data:`ROLE_CHECKS` names, for each other role, the checks that exercise it
too. A new check that calls a role beyond the core is listed under it (a unit test runs every
check against adapters that each lack one role, so a missing listing fails).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import ConfigurationError

__all__ = ["CORE_ROLES", "MEMORY_ROLES", "ROLE_CHECKS", "check_roles", "checks_for_roles"]

CORE_ROLES = frozenset({"entries", "indexing"})
"""The roles every check needs: the facade writes entries (``EntryStore``) and indexes them
(``IndexingLedger``)."""

MEMORY_ROLES = ("entries", "indexing", "governance", "shares", "working", "generations")
"""Every role the memory suite knows: the four of ``VectorStore``, the ``WorkingStore`` and the
optional ``VectorGenerations`` (whose checks a store without that role is never asked)."""

ROLE_CHECKS: Mapping[str, tuple[str, ...]] = {
    # GovernanceStore.apply_governance: consent, correction, forgetting, hold, retention
    "governance": (
        "consent_is_the_single_gate",
        "lineage_invalidation_and_correction",
        "forget_deletes_along_lineage_and_holds",
        "lineage_caps_fail_closed",
        "forget_before_cuts_on_occurrence",
        "retention_is_enforced_on_read",
        "message_range_returns_neighbours",
        "replayed_remember_never_undoes_governance",
        "failing_hook_cannot_block_revocation",
        "regrant_keeps_other_causes_tombstones",
        "forgotten_ids_do_not_poison_reuse",
        "forget_races_never_resurrect_dependents",
        "id_arguments_refuse_bare_strings_and_are_capped",
        "chains_derived_after_a_revocation_stay_excluded",
        "index_status_takes_any_number_of_ids",
        "sweeps_progress_past_wide_lineage",
        "search_reports_statistics_of_recallable_entries",
        "search_counts_only_recallable_holders_of_a_term",
        "embedding_model_is_recorded_and_checked",
        "resource_recall_keeps_every_exclusion_rule",
        "merge_metadata_patches_only_the_version_read",
        "import_inherits_the_exclusions_of_its_sources",
        "import_races_with_forget_never_resurrect",
        "generation_vectors_check_revision_and_width",
        "generation_vectors_go_with_their_entry",
        "next_embedder_writes_keep_the_generation_complete",
        "a_corrected_long_entry_is_searchable_past_its_window",
        "reranker_sees_only_recallable_entries",
    ),
    # ShareGrants: Memory.share and recall over a parent's shared entries
    "shares": (
        "sharing_is_parent_to_child_only",
        "resource_recall_keeps_every_exclusion_rule",
        "reranker_sees_only_recallable_entries",
    ),
    # the WorkingStore: working memory and the prompt built from it
    "working": (
        "working_memory_versions_and_template",
        "working_memory_rejects_bad_documents",
        "working_memory_processor_and_thread_scope",
        "redaction_scrubs_before_persist_and_inject",
        "consent_is_the_single_gate",
        "bad_scopes_are_rejected",
        "failing_hook_cannot_block_revocation",
        "unstorable_input_is_refused_alike",
        "template_values_cannot_forge_headers",
    ),
    # the optional VectorGenerations: a shadow generation, its backfill, the switch and rollback
    "generations": (
        "generations_start_is_idempotent_and_refuses_conflicts",
        "generation_claims_lease_each_entry_to_one_worker",
        "generation_vectors_check_revision_and_width",
        "generation_switch_waits_for_the_backfill_and_rolls_back",
        "generation_switch_tolerates_writes_within_the_lag",
        "generation_vectors_go_with_their_entry",
        "recall_follows_the_active_generation",
        "next_embedder_writes_keep_the_generation_complete",
        "promotion_in_batches_answers_the_same_throughout",
        "promotion_refusals_change_nothing",
        "promotion_waits_for_entries_without_the_new_vector",
        "an_old_model_write_after_the_promotion_is_promoted_again",
        "promotion_interleaved_with_writes_and_reads",
    ),
}
"""For each role beyond :data:`CORE_ROLES`, the checks that exercise it."""


def check_roles(name: str) -> frozenset[str]:
    """The roles check ``name`` exercises: the core and every role listing it."""
    return CORE_ROLES | {role for role, names in ROLE_CHECKS.items() if name in names}


def checks_for_roles(names: Iterable[str], roles: Iterable[str]) -> list[str]:
    """Those of ``names`` whose every role is among ``roles`` (in the order of ``names``).

    ``roles`` must name the core roles and only known ones (:class:`ConfigurationError`
    otherwise): the facade cannot run without entries and their indexing."""
    if isinstance(roles, str):
        raise ConfigurationError("roles must be a collection of role names, not one string")
    wanted = frozenset(roles)
    if not wanted <= set(MEMORY_ROLES):
        raise ConfigurationError(f"roles names an unknown role; known: {', '.join(MEMORY_ROLES)}")
    if not wanted >= CORE_ROLES:
        raise ConfigurationError(
            f"roles must include the core roles {', '.join(sorted(CORE_ROLES))}"
        )
    return [name for name in names if check_roles(name) <= wanted]
