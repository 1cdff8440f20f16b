//! Finding work: an operator's or Conn's page of items.

use muster_domain::Principal;
use muster_domain::listing::ItemFilter;

use super::Muster;
use crate::auth::may_read_items;
use crate::error::AppError;
use crate::views::ItemPage;

impl Muster {
    /// `GET /v1/items`: one page of the items that match `filter`, oldest first by id.
    pub async fn list_items(
        &self,
        actor: Principal,
        filter: ItemFilter,
    ) -> Result<ItemPage, AppError> {
        may_read_items(actor)?;
        let limit = filter.limit() as usize;
        // One row more than the page tells whether there is a next page.
        let mut items = self
            .stores
            .items
            .list_items(&filter, filter.limit() + 1)
            .await?;
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|i| i.id.clone())
        } else {
            None
        };
        Ok(ItemPage { items, next })
    }
}
