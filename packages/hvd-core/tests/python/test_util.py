# test_util.py - horovod.common.util helpers that Horovod's own test suites
# and framework bindings import.
import pytest

from horovod.common.util import is_version_greater_equal_than, num_rank_is_power_2, split_list


def test_is_version_greater_equal_than_compares_release_numbers():
    assert is_version_greater_equal_than("2.21.0", "2.16")
    assert is_version_greater_equal_than("2.16", "2.16.0")
    assert not is_version_greater_equal_than("2.15.1", "2.16")
    assert is_version_greater_equal_than("2.13.0+cpu", "2.1")
    for bad in ((2, "1.0"), ("1.0", None), ("not a version", "1.0")):
        with pytest.raises(ValueError):
            is_version_greater_equal_than(*bad)


def test_split_list_balances_parts_and_power_of_two_is_exact():
    assert split_list(list(range(5)), 2) == [[0, 1, 2], [3, 4]]
    assert num_rank_is_power_2(4) and not num_rank_is_power_2(6)
