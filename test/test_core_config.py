import pytest

from emem_ros import MemoryConfig
from emem_ros.core.errors import InvalidInputError


def test_defaults_are_valid_and_keep_emem_names():
    config = MemoryConfig().validate()
    for name in ("working_memory_size", "flush_interval", "flush_batch_size", "consolidation_window",
                 "consolidation_spatial_eps", "archive_after_seconds", "entity_similarity_threshold",
                 "entity_spatial_radius", "recency_weight", "hnsw_ef_construction", "hnsw_m"):
        assert hasattr(config, name)


@pytest.mark.parametrize(
    "field, value",
    [
        ("flush_batch_size", 0),
        ("working_memory_size", -1),
        ("consolidation_spatial_eps", float("nan")),
        ("entity_similarity_threshold", 1.5),
        ("flush_interval", -0.1),
        ("hnsw_m", "sixteen"),
        ("archive_retention", "shred"),
        ("db_path", ""),
    ],
)
def test_bad_values_are_named(field, value):
    with pytest.raises(InvalidInputError) as info:
        MemoryConfig(**{field: value}).validate()
    assert field in str(info.value)


def test_batch_larger_than_buffer_is_rejected():
    with pytest.raises(InvalidInputError, match="flush_batch_size"):
        MemoryConfig(working_memory_size=10, flush_batch_size=20).validate()


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(InvalidInputError, match="flush_intervall"):
        MemoryConfig.from_dict({"flush_intervall": 1.0})
    assert MemoryConfig.from_dict({"flush_interval": 0.5}).flush_interval == 0.5
