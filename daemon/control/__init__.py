"""The scheduler and what it decides: buffers, decisions and the commands they cause
(``scheduler``), what it tracks of each job (``live``), how a master registers
(``registration``) and how a job ends (``endings``), the ZeroMQ ROUTER those commands go out
on (``broker``), job tokens (``tokens``) and the Slurm name check (``slurm_identity``)."""
