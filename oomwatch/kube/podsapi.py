"""The pod calls oomwatch makes (list, watch, merge-patch), on the official client's transport.

The generated `CoreV1Api` is a 63,000-line module whose import builds pydantic models for
every core resource: about 21 MiB of resident memory on every node, for three requests.
These go through the same `ApiClient` (authentication, TLS, proxy, request serialisation,
`ApiException` on non-2xx) without it.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

PODS_PATH = "/api/v1/pods"
POD_PATH = "/api/v1/namespaces/{namespace}/pods/{name}"


class PodsApi:
    """`list_pod_for_all_namespaces` (also the watch, via `kubernetes.watch.Watch`) and
    `patch_namespaced_pod`, returning raw responses instead of models."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client

    def list_pod_for_all_namespaces(
        self,
        *,
        field_selector: str | None = None,
        resource_version: str | None = None,
        allow_watch_bookmarks: bool | None = None,
        timeout_seconds: int | None = None,
        watch: bool | None = None,
        _preload_content: bool = False,
        _request_timeout: Any = None,
    ) -> Any:
        """GET /api/v1/pods; the raw urllib3 response (JSON list, or a watch stream)."""
        query = [
            (key, value)
            for key, value in (
                ("allowWatchBookmarks", allow_watch_bookmarks),
                ("fieldSelector", field_selector),
                ("resourceVersion", resource_version),
                ("timeoutSeconds", timeout_seconds),
                ("watch", watch),
            )
            if value is not None
        ]
        return self._call("GET", PODS_PATH, {}, query, None, None, _request_timeout)

    def patch_namespaced_pod(
        self,
        name: str,
        namespace: str,
        body: dict[str, Any],
        *,
        _content_type: str,
        _request_timeout: Any = None,
    ) -> None:
        """PATCH one pod (oomwatch sends JSON merge patches)."""
        path_params = {"namespace": namespace, "name": name}
        self._call("PATCH", POD_PATH, path_params, [], body, _content_type, _request_timeout)

    def _call(
        self,
        method: str,
        path: str,
        path_params: dict[str, str],
        query: list[tuple[str, Any]],
        body: dict[str, Any] | None,
        content_type: str | None,
        request_timeout: Any,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        request = self._api.param_serialize(
            method=method,
            resource_path=path,
            path_params=path_params,
            query_params=query,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*request, _request_timeout=request_timeout)
        if not 200 <= response.status <= 299:
            response.read()  # type: ignore[no-untyped-call]
            raise client.ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response
