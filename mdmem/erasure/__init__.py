"""Erasure: plan, rewrite, receipt and the proof that something is gone."""
