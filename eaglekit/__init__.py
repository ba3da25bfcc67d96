"""eaglekit: convert, inspect, validate, verify and publish EAGLE 3 / 3.1 speculative-decoding drafters."""

__version__ = "0.1.0"

# The version of eaglekit's JSON contract: every --json document starts with it (docs/json.md). Bump it on
# any change that could break a reader (a key removed or renamed, a meaning changed); a key added is no change to it.
# A key that moves is added under its new name first, and the old one kept beside it, holding the same value, for one
# release; it goes with the next bump. Moved so, waiting for 3: inspect's "notes" (now "findings", as validate's).
SCHEMA_VERSION = 2  # 2: validate's engine_view no longer repeats the engine's findings (they are in findings)
