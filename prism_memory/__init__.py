"""prism_memory: durable, governed working and semantic memory for AI-agent hosts."""
