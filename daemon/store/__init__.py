"""The SQLite store (``store``) and the parts it holds: its connections (``database``), pages
of history (``history``), what is kept and for how long (``retention``) and the TPM's samples
and models (``tpm``); a job's row (``job_record``), read-only connections (``readers``), why a
write fails (``fault``), the backup before a migration (``backup``), which database this is
(``identity``), and the node's retirement of ended jobs (``retirement``)."""
