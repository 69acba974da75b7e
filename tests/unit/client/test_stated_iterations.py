"""How long an attached job says it runs: the daemon's default policy plans on it."""

from torch.utils.data import DataLoader, IterableDataset

from adloader.client.master.attach import stated_iterations
from adloader.limits import MAX_ITERATIONS


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(10))


def test_epochs_count_the_loaders_batches():
    loader = DataLoader(list(range(100)), batch_size=8)  # 13 batches an epoch
    assert stated_iterations(None, 3, loader) == 39
    assert stated_iterations(50, 3, loader) == 50  # given iterations win


def test_nothing_known_stays_unknown():
    assert stated_iterations(None, None, DataLoader(list(range(10)))) is None
    assert stated_iterations(None, 2, DataLoader(Stream(), batch_size=2)) is None  # no length
    assert stated_iterations(None, 2, None) is None
    assert stated_iterations(None, 2, []) is None  # an empty loader runs no step


def test_a_huge_count_is_capped_to_what_the_protocol_takes():
    class Huge:
        def __len__(self):
            return 10**9

    assert stated_iterations(None, 10**6, Huge()) == MAX_ITERATIONS
