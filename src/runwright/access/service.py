"""`Access`: every action of both faces, for one actor on one store and root."""

from runwright.access.admin import AdminActions
from runwright.access.dashboard import DashboardActions
from runwright.access.datasets import DataContractActions
from runwright.access.downloads import DownloadActions
from runwright.access.experiments import ExperimentActions
from runwright.access.operator import OperatorActions
from runwright.access.releases import ReleaseActions
from runwright.access.runs import RunActions
from runwright.access.storage import StorageActions


class Access(
    OperatorActions,
    RunActions,
    StorageActions,
    ReleaseActions,
    AdminActions,
    DashboardActions,
    DataContractActions,
    DownloadActions,
    ExperimentActions,
):
    """Runs, datasets, checkpoints, releases, experiments, tokens, roles and the audit log, as
    one actor may use them. The server builds one per request (its actor from the token), a
    CLI on the store one per command (`local_actor()`)."""

    remote = False
    """The CLI's seam (cli/backend.py): this one works on the store itself."""
