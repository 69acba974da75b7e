"""The SQLite store (``store``): a job's row (``job_record``), pages of history
(``history``), what is kept and for how long (``retention``), read-only connections
(``readers``), why a write fails (``fault``), the backup before a migration (``backup``),
which database this is (``identity``) and the TPM's samples and models (``tpm``)."""
