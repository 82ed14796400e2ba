from lab_fixtures import memcg_v1, scratch

__all__ = ["memcg_v1", "scratch"]
